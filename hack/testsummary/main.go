// Command testsummary reads `go test -json` on stdin and makes a test run impossible to
// misread: it prints the output of every failing test, every skipped test with its reason,
// and a table of tests run / passed / failed / skipped per package; and it fails when a
// suite that must run (listed in a requirements file) ran no test or skipped one.
//
// Usage: go test -json ./... | go run ./hack/testsummary [-require test/required-suites.txt]
//
// The requirements file has one rule per line: `<package-pattern> <mode> [<condition>]`.
// A pattern is an import path, or a prefix ending in `/...`. Modes:
//
//	ran      at least one test of the package ran (not skipped)
//	no-skip  at least one test ran and none was skipped
//
// An optional condition limits the rule: `if-file=<path>` applies it only when the path
// exists (relative to the working directory), e.g. the VM suites only where the guest image
// was built. Lines starting with # are comments.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time        time.Time
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	ImportPath  string
	FailedBuild string
}

type testState struct {
	output []string // bounded: the last maxLines lines
	ended  bool     // a pass, fail or skip event arrived
}

type pkgState struct {
	run, passed, failed, skipped int
	skippedTests                 []string // "Test: reason"
	failed0                      bool     // the package itself failed (build or TestMain)
	output                       []string // package-level output (bounded)
	tests                        map[string]*testState
	elapsed                      float64
}

const (
	maxLines      = 200 // per test, kept for failures and skip reasons
	maxPkgLines   = 200
	maxLineLength = 4096
)

func appendBounded(lines []string, s string, max int) []string {
	if len(s) > maxLineLength {
		s = s[:maxLineLength] + "…\n"
	}
	lines = append(lines, s)
	if len(lines) > max {
		lines = lines[len(lines)-max:]
	}
	return lines
}

type rule struct {
	pattern, mode, ifFile string
}

func (r rule) matches(pkg string) bool {
	if p, ok := strings.CutSuffix(r.pattern, "/..."); ok {
		return pkg == p || strings.HasPrefix(pkg, p+"/")
	}
	return pkg == r.pattern
}

func readRules(path string) ([]rule, error) {
	if path == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rules []rule
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || (f[1] != "ran" && f[1] != "no-skip") {
			return nil, fmt.Errorf("%s:%d: want `<package-pattern> ran|no-skip [if-file=PATH]`", path, i+1)
		}
		r := rule{pattern: f[0], mode: f[1]}
		for _, c := range f[2:] {
			v, ok := strings.CutPrefix(c, "if-file=")
			if !ok {
				return nil, fmt.Errorf("%s:%d: unknown condition %q", path, i+1, c)
			}
			r.ifFile = v
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func main() {
	require := flag.String("require", "", "requirements file (see the package documentation)")
	flag.Parse()
	rules, err := readRules(*require)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	code := summarize(os.Stdin, os.Stdout, rules)
	os.Exit(code)
}

func summarize(in io.Reader, out io.Writer, rules []rule) int {
	pkgs := map[string]*pkgState{}
	get := func(name string) *pkgState {
		p := pkgs[name]
		if p == nil {
			p = &pkgState{tests: map[string]*testState{}}
			pkgs[name] = p
		}
		return p
	}
	var buildOutput []string
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	nonJSON := 0
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			// go vet / build errors printed outside the JSON stream.
			fmt.Fprintln(out, string(line))
			nonJSON++
			continue
		}
		switch ev.Action {
		case "build-output":
			buildOutput = appendBounded(buildOutput, ev.Output, maxPkgLines)
			continue
		case "build-fail":
			continue
		}
		if ev.Package == "" {
			continue
		}
		p := get(ev.Package)
		if ev.Test == "" {
			switch ev.Action {
			case "output":
				p.output = appendBounded(p.output, ev.Output, maxPkgLines)
			case "fail":
				p.failed0 = true
				p.elapsed = ev.Elapsed
				fmt.Fprintf(out, "FAIL  %s (%.1fs) run=%d skip=%d fail=%d\n", ev.Package, ev.Elapsed, p.run, p.skipped, p.failed)
			case "pass":
				p.elapsed = ev.Elapsed
				fmt.Fprintf(out, "ok    %s (%.1fs) run=%d skip=%d\n", ev.Package, ev.Elapsed, p.run, p.skipped)
			case "skip":
				p.elapsed = ev.Elapsed
			}
			continue
		}
		t := p.tests[ev.Test]
		if t == nil {
			t = &testState{}
			p.tests[ev.Test] = t
		}
		switch ev.Action {
		case "output":
			t.output = appendBounded(t.output, ev.Output, maxLines)
		case "pass", "fail", "skip":
			t.ended = true
		}
		switch ev.Action {
		case "pass":
			p.passed++
			p.run++
			t.output = nil
		case "fail":
			p.failed++
			p.run++
			fmt.Fprintf(out, "--- FAIL: %s %s (%.2fs)\n", ev.Package, ev.Test, ev.Elapsed)
			for _, l := range t.output {
				fmt.Fprint(out, "    ", l)
			}
			t.output = nil
		case "skip":
			reason := skipReason(t.output)
			p.skipped++
			p.skippedTests = append(p.skippedTests, ev.Test+": "+reason)
			fmt.Fprintf(out, "--- SKIP: %s %s: %s\n", ev.Package, ev.Test, reason)
			t.output = nil
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testsummary: reading input:", err)
		return 2
	}
	for _, l := range buildOutput {
		fmt.Fprint(out, l)
	}

	names := make([]string, 0, len(pkgs))
	for n := range pkgs {
		names = append(names, n)
	}
	sort.Strings(names)
	code := 0
	var tot pkgState
	fmt.Fprintf(out, "\n%-62s %5s %5s %5s %5s %8s\n", "package", "run", "pass", "fail", "skip", "seconds")
	for _, n := range names {
		p := pkgs[n]
		status := ""
		if p.failed0 || p.failed > 0 {
			status = "  FAIL"
			code = 1
			if p.failed == 0 {
				// The package failed outside any test (TestMain, build, panic): show why.
				fmt.Fprintf(out, "--- FAIL (package): %s\n", n)
				for _, l := range p.output {
					fmt.Fprint(out, "    ", l)
				}
			}
			// A test that never ended was running when the package died (a -timeout
			// panic is attributed to it): its last lines say where it was.
			printUnfinished(out, n, p)
		}
		if len(p.tests) == 0 && !p.failed0 {
			if strings.Contains(strings.Join(p.output, ""), "no test files") {
				continue
			}
		}
		fmt.Fprintf(out, "%-62s %5d %5d %5d %5d %8.1f%s\n", n, p.run, p.passed, p.failed, p.skipped, p.elapsed, status)
		tot.run += p.run
		tot.passed += p.passed
		tot.failed += p.failed
		tot.skipped += p.skipped
	}
	fmt.Fprintf(out, "%-62s %5d %5d %5d %5d\n", "TOTAL", tot.run, tot.passed, tot.failed, tot.skipped)

	for _, r := range rules {
		if r.ifFile != "" {
			if _, err := os.Stat(r.ifFile); err != nil {
				fmt.Fprintf(out, "requirement %s %s: not applied (%s absent)\n", r.pattern, r.mode, r.ifFile)
				continue
			}
		}
		matched := false
		for _, n := range names {
			if !r.matches(n) {
				continue
			}
			matched = true
			p := pkgs[n]
			switch {
			case p.run == 0:
				fmt.Fprintf(out, "REQUIRED SUITE DID NOT RUN: %s ran no test (rule %s %s); package output:\n", n, r.pattern, r.mode)
				for _, l := range p.output {
					fmt.Fprint(out, "    ", l)
				}
				code = 1
			case r.mode == "no-skip" && p.skipped > 0:
				fmt.Fprintf(out, "REQUIRED SUITE SKIPPED TESTS: %s skipped %d (rule %s %s):\n", n, p.skipped, r.pattern, r.mode)
				for _, s := range p.skippedTests {
					fmt.Fprintln(out, "    ", s)
				}
				code = 1
			}
		}
		if !matched {
			fmt.Fprintf(out, "REQUIRED SUITE MISSING: no package matched %s\n", r.pattern)
			code = 1
		}
	}
	if nonJSON > 0 && code == 0 && tot.run == 0 {
		code = 1
	}
	return code
}

// printUnfinished prints every test of p that started but never passed, failed or
// skipped, with its bounded last lines, in name order.
func printUnfinished(out io.Writer, pkg string, p *pkgState) {
	var names []string
	for name, t := range p.tests {
		if !t.ended {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(out, "--- UNFINISHED: %s %s (running when the package ended)\n", pkg, name)
		for _, l := range p.tests[name].output {
			fmt.Fprint(out, "    ", l)
		}
	}
}

// skipReason is the last non-framework output line of a skipped test (what t.Skip said).
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		return l
	}
	return "(no reason given)"
}

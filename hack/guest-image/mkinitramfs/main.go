// Command mkinitramfs writes a reproducible initramfs: a cpio "newc" archive whose entries
// are sorted by path, owned by 0:0, numbered sequentially and stamped with one fixed
// mtime, optionally gzip-compressed with a fixed header. It needs no root (device nodes
// are archive entries, not mknod calls).
//
// The spec lists one entry a line, in the format of the kernel's gen_init_cpio:
//
//	dir   <name> <mode>
//	file  <name> <source> <mode>
//	slink <name> <target> <mode>
//	nod   <name> <mode> <c|b> <major> <minor>
//
// Modes are octal; '#' starts a comment. Usage:
//
//	mkinitramfs -spec spec.txt -o initramfs.cpio [-mtime 0] [-gzip]
package main

import (
	"bufio"
	"compress/gzip"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

type entry struct {
	name   string
	mode   uint32 // including the file type bits
	source string // file: source path; slink: target
	rmajor uint32
	rminor uint32
}

const (
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFLNK = 0o120000
	sIFCHR = 0o020000
	sIFBLK = 0o060000
	// maxEntries and maxSpecBytes bound the spec.
	maxEntries   = 100000
	maxSpecBytes = 4 << 20
)

func main() {
	spec := flag.String("spec", "", "spec file (gen_init_cpio format)")
	out := flag.String("o", "", "output file")
	mtime := flag.Int64("mtime", 0, "mtime of every entry (seconds since the epoch; SOURCE_DATE_EPOCH)")
	gz := flag.Bool("gzip", false, "gzip the archive (fixed header)")
	checkStatic := flag.String("check-static", "", "only check that this ELF file has no program interpreter (is static) and exit")
	flag.Parse()
	if *checkStatic != "" {
		if err := isStatic(*checkStatic); err != nil {
			fmt.Fprintln(os.Stderr, "mkinitramfs:", err)
			os.Exit(1)
		}
		return
	}
	if *spec == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*spec, *out, *mtime, *gz); err != nil {
		fmt.Fprintln(os.Stderr, "mkinitramfs:", err)
		os.Exit(1)
	}
}

// isStatic fails unless path is an ELF executable without a PT_INTERP program header.
func isStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", path)
		}
	}
	return nil
}

func parseMode(s string) (uint32, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("mode %q", s)
	}
	return uint32(m), nil
}

func parseSpec(path string) ([]entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var es []entry
	seen := map[string]bool{}
	sc := bufio.NewScanner(io.LimitReader(f, maxSpecBytes))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fs := strings.Fields(line)
		if len(fs) == 0 {
			continue
		}
		bad := func(err error) error { return fmt.Errorf("%s:%d: %q: %w", path, n, sc.Text(), err) }
		if len(fs) < 3 {
			return nil, bad(errors.New("too few fields"))
		}
		e := entry{name: strings.TrimPrefix(fs[1], "/")}
		if e.name == "" || strings.Contains(e.name, "..") {
			return nil, bad(errors.New("bad name"))
		}
		var mode uint32
		switch fs[0] {
		case "dir":
			if len(fs) != 3 {
				return nil, bad(errors.New("want: dir name mode"))
			}
			mode, err = parseMode(fs[2])
			e.mode = sIFDIR | mode
		case "file", "slink":
			if len(fs) != 4 {
				return nil, bad(errors.New("want: " + fs[0] + " name source mode"))
			}
			mode, err = parseMode(fs[3])
			e.source = fs[2]
			if fs[0] == "file" {
				e.mode = sIFREG | mode
			} else {
				e.mode = sIFLNK | mode
			}
		case "nod":
			if len(fs) != 6 {
				return nil, bad(errors.New("want: nod name mode c|b major minor"))
			}
			mode, err = parseMode(fs[2])
			switch fs[3] {
			case "c":
				e.mode = sIFCHR | mode
			case "b":
				e.mode = sIFBLK | mode
			default:
				return nil, bad(errors.New("device type must be c or b"))
			}
			maj, err1 := strconv.ParseUint(fs[4], 10, 32)
			mnr, err2 := strconv.ParseUint(fs[5], 10, 32)
			if err1 != nil || err2 != nil {
				return nil, bad(errors.New("device numbers"))
			}
			e.rmajor, e.rminor = uint32(maj), uint32(mnr)
		default:
			return nil, bad(errors.New("unknown entry type"))
		}
		if err != nil {
			return nil, bad(err)
		}
		if seen[e.name] {
			return nil, bad(errors.New("duplicate name"))
		}
		seen[e.name] = true
		if es = append(es, e); len(es) > maxEntries {
			return nil, fmt.Errorf("more than %d entries", maxEntries)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// Sorted by path: a parent sorts before its children.
	sort.Slice(es, func(i, j int) bool { return es[i].name < es[j].name })
	return es, nil
}

type cpioWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	m, err := c.w.Write(b)
	c.n += int64(m)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) header(ino uint32, mode uint32, nlink uint32, mtime int64, size uint32, rmaj, rmin uint32, name string) {
	fields := []uint32{ino, mode, 0, 0, nlink, uint32(mtime), size, 0, 0, rmaj, rmin, uint32(len(name) + 1), 0}
	var sb strings.Builder
	sb.WriteString("070701")
	for _, f := range fields {
		fmt.Fprintf(&sb, "%08X", f)
	}
	c.write([]byte(sb.String()))
	c.write(append([]byte(name), 0))
	c.pad()
}

func run(specPath, out string, mtime int64, gz bool) error {
	es, err := parseSpec(specPath)
	if err != nil {
		return err
	}
	f, err := os.Create(out + ".tmp")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(out + ".tmp") }() // gone after the rename; removes a failed build
	var w io.Writer = f
	var zw *gzip.Writer
	if gz {
		// A zero gzip header (no name, no mtime) keeps the output reproducible.
		zw, _ = gzip.NewWriterLevel(f, gzip.BestCompression)
		w = zw
	}
	c := &cpioWriter{w: w}
	for i, e := range es {
		ino := uint32(i + 1)
		switch e.mode &^ 0o7777 {
		case sIFDIR:
			c.header(ino, e.mode, 2, mtime, 0, 0, 0, e.name)
		case sIFLNK:
			c.header(ino, e.mode, 1, mtime, uint32(len(e.source)), 0, 0, e.name)
			c.write([]byte(e.source))
			c.pad()
		case sIFCHR, sIFBLK:
			c.header(ino, e.mode, 1, mtime, 0, e.rmajor, e.rminor, e.name)
		case sIFREG:
			data, err := os.ReadFile(e.source)
			if err != nil {
				return err
			}
			if int64(len(data)) > 1<<31 {
				return fmt.Errorf("%s: too large", e.source)
			}
			c.header(ino, e.mode, 1, mtime, uint32(len(data)), 0, 0, e.name)
			c.write(data)
			c.pad()
		}
	}
	c.header(0, 0, 1, 0, 0, 0, 0, "TRAILER!!!")
	if c.err != nil {
		return c.err
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(out+".tmp", out)
}

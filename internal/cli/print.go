package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"sensorium.dev/workbench/internal/termsafe"
	wbclient "sensorium.dev/workbench/pkg/client"
)

func marshalYAML(v any) ([]byte, error) { return yaml.Marshal(v) }

// typed sets apiVersion and kind on objects read through the typed client (which leaves
// them empty), so -o json|yaml prints what kubectl would.
func typed[T runtime.Object](obj T) T {
	if gvks, _, err := wbclient.Scheme.ObjectKinds(obj); err == nil && len(gvks) > 0 {
		obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	}
	return obj
}

// objectList is what -o json|yaml prints for a list: a v1 List as kubectl does.
type objectList struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Items      []any  `json:"items"`
}

func listOf[T any](items []T, conv func(*T) runtime.Object) objectList {
	l := objectList{APIVersion: "v1", Kind: "List", Items: []any{}}
	for i := range items {
		l.Items = append(l.Items, typed(conv(&items[i])))
	}
	return l
}

// table prints rows under header, every cell through termsafe.Line: a cell holds names,
// paths, phases and argv from objects and nodes, never a control byte or a tab of its own.
func table(w io.Writer, header string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, header)
	cells := []string{}
	for _, r := range rows {
		cells = cells[:0]
		for _, c := range r {
			cells = append(cells, termsafe.Line(c))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	_ = tw.Flush()
}

func age(t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

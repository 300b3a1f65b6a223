package kstate

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sensorium.dev/workbench/internal/test/testkit"
)

// Get reads ns/name into obj and returns it; a failed read fails the test.
func Get[T client.Object](t testing.TB, c client.Reader, ns, name string, obj T) T {
	t.Helper()
	testkit.Must(t, read(c, ns, name, obj))
	return obj
}

// read reads ns/name into obj after zeroing it: decoding into an object read before keeps
// the fields the new read omits (a cleared status field would read as its old value).
func read(c client.Reader, ns, name string, obj client.Object) error {
	v := reflect.ValueOf(obj).Elem()
	v.Set(reflect.Zero(v.Type()))
	return c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)
}

// Until reads ns/name into obj until ok holds on it (polling as testkit.Eventually does) and
// returns obj as last read. On timeout it fails the test naming what it waited for and the
// status it last read (or the read's error: a read that fails is "not yet").
func Until[T client.Object](t testing.TB, c client.Reader, timeout time.Duration, what, ns, name string, obj T, ok func(T) bool) T {
	t.Helper()
	testkit.Eventually(t, timeout, what, func() (bool, string) {
		if err := read(c, ns, name, obj); err != nil {
			return false, err.Error()
		}
		return ok(obj), StatusOf(obj)
	})
	return obj
}

// Gone waits until ns/name, of obj's kind, is not found.
func Gone(t testing.TB, c client.Reader, timeout time.Duration, ns, name string, obj client.Object) {
	t.Helper()
	testkit.Eventually(t, timeout, fmt.Sprintf("%s/%s gone", ns, name), func() (bool, string) {
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// StatusOf prints obj's Status field (the whole object when it has none), for a failure
// message.
func StatusOf(obj any) string {
	v := reflect.Indirect(reflect.ValueOf(obj))
	if v.Kind() == reflect.Struct {
		if s := v.FieldByName("Status"); s.IsValid() {
			return fmt.Sprintf("%+v", s.Interface())
		}
	}
	return fmt.Sprintf("%+v", obj)
}

// Update reads ns/name into obj, applies mut and writes it back through c, retrying on
// conflicts with the controllers' writes. It returns the read's or the write's error (a
// refusal, for the tests that expect one).
func Update[T client.Object](c client.Client, ns, name string, obj T, mut func(T)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := read(c, ns, name, obj); err != nil {
			return err
		}
		mut(obj)
		return c.Update(context.Background(), obj)
	})
}

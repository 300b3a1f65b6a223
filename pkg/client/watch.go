package client

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrGone is returned by waits whose object was deleted before the condition held.
var ErrGone = errors.New("object was deleted")

// waitFor reads obj (namespace and name set) and then watches it until done returns true
// or an error, ctx ends, or the object is deleted (ErrGone). It never polls: a closed
// watch is re-established from the last resource version seen.
func waitFor[T ctrlclient.Object](ctx context.Context, c *Client, obj T, list ctrlclient.ObjectList, done func(T) (bool, error)) error {
	key := ctrlclient.ObjectKeyFromObject(obj)
	if err := c.Kube.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%T %s: %w", obj, key, ErrGone)
		}
		return Wrap(key.String(), err)
	}
	ow := &objectWatch[T]{c: c, obj: obj, list: list}
	defer ow.stop()
	return ow.until(ctx, done)
}

// objectWatch follows one object from the state the caller holds (a created object, or
// one just read: its resourceVersion is where the watch starts, so nothing is read again).
// One watch serves successive until calls; it is opened on first need and re-established
// from the last resource version seen when the server closes it.
type objectWatch[T ctrlclient.Object] struct {
	c    *Client
	obj  T
	list ctrlclient.ObjectList
	w    watch.Interface
}

// until returns when done(obj) holds (nil), done errs, ctx ends or the object is deleted
// (ErrGone). obj is updated in place with every event seen.
func (ow *objectWatch[T]) until(ctx context.Context, done func(T) (bool, error)) error {
	obj := ow.obj
	key := ctrlclient.ObjectKeyFromObject(obj)
	what := fmt.Sprintf("%T %s", obj, key)
	for {
		if ok, err := done(obj); ok || err != nil {
			return err
		}
		if ow.w == nil {
			w, err := ow.c.Kube.Watch(ctx, ow.list, &ctrlclient.ListOptions{
				Namespace:     key.Namespace,
				FieldSelector: fields.OneTermEqualSelector("metadata.name", key.Name),
				Raw:           &metav1.ListOptions{ResourceVersion: obj.GetResourceVersion(), AllowWatchBookmarks: false},
			})
			if err != nil {
				return Wrap(key.String(), err)
			}
			ow.w = w
		}
		closed, err := drain(ctx, ow.w, obj, done)
		if err != nil || !closed {
			if err == nil {
				return nil
			}
			ow.stop()
			if errors.Is(err, ErrGone) {
				return fmt.Errorf("%s: %w", what, ErrGone)
			}
			return err
		}
		// The watch ended (timeout, resource version too old): read again and re-watch.
		ow.stop()
		if err := ow.c.Kube.Get(ctx, key, obj); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("%s: %w", what, ErrGone)
			}
			return Wrap(key.String(), err)
		}
	}
}

// stop ends the watch, if one is open.
func (ow *objectWatch[T]) stop() {
	if ow.w != nil {
		ow.w.Stop()
		ow.w = nil
	}
}

// drain reads w until done holds (closed=false, err=nil), the watch closes (closed=true),
// the object is deleted (ErrGone) or ctx ends.
func drain[T ctrlclient.Object](ctx context.Context, w watch.Interface, obj T, done func(T) (bool, error)) (closed bool, _ error) {
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return true, nil
			}
			switch ev.Type {
			case watch.Deleted:
				return false, ErrGone
			case watch.Error:
				return true, nil
			case watch.Added, watch.Modified:
				got, ok := ev.Object.(T)
				if !ok {
					continue
				}
				reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(got).Elem())
				if ok, err := done(obj); ok || err != nil {
					return false, err
				}
			}
		}
	}
}

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
	what := fmt.Sprintf("%T %s", obj, key)
	if err := c.Kube.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%s: %w", what, ErrGone)
		}
		return Wrap(key.String(), err)
	}
	for {
		if ok, err := done(obj); ok || err != nil {
			return err
		}
		w, err := c.Kube.Watch(ctx, list, &ctrlclient.ListOptions{
			Namespace:     key.Namespace,
			FieldSelector: fields.OneTermEqualSelector("metadata.name", key.Name),
			Raw:           &metav1.ListOptions{ResourceVersion: obj.GetResourceVersion(), AllowWatchBookmarks: false},
		})
		if err != nil {
			return Wrap(key.String(), err)
		}
		closed, err := drain(ctx, w, obj, done)
		w.Stop()
		if err != nil || !closed {
			if err == nil {
				return nil
			}
			if errors.Is(err, ErrGone) {
				return fmt.Errorf("%s: %w", what, ErrGone)
			}
			return err
		}
		// The watch ended (timeout, resource version too old): read again and re-watch.
		if err := c.Kube.Get(ctx, key, obj); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("%s: %w", what, ErrGone)
			}
			return Wrap(key.String(), err)
		}
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

package status

import (
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// sessionStore is what the boot server needs of a store of sessions.
type sessionStore interface {
	UseToken(id string, expires time.Time) (bool, error)
	Session(key string) (Session, bool)
	PutSession(key string, s Session) error
}

func TestSessions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status.db")
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	var first *Durable
	for name, store := range map[string]func() sessionStore{
		"memory": func() sessionStore { return &MemorySessions{Now: func() time.Time { return now }} },
		"durable": func() sessionStore {
			first = open(t, path, Options{Now: func() time.Time { return now }})
			return first
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := store()
			for i, want := range []bool{true, false, false} {
				if fresh, err := s.UseToken("id-1", now.Add(time.Minute)); err != nil || fresh != want {
					t.Errorf("use %d: %v %v, want %v", i, fresh, err, want)
				}
			}
			if _, ok := s.Session("lab/a"); ok {
				t.Error("a session before any")
			}
			want := Session{ID: "s1", Generation: 2, Steps: 4, Need: 3, Actions: []string{"wipe-disk", "image-to-disk", "qa-disk", "reboot"}, Done: 1, DoneSeq: 99, Peer: "198.18.0.10", Started: now, Expires: now.Add(time.Hour)}
			if err := s.PutSession("lab/a", want); err != nil {
				t.Fatal(err)
			}
			if got, ok := s.Session("lab/a"); !ok || !reflect.DeepEqual(got, want) {
				t.Errorf("session: %+v %v", got, ok)
			}
			if !want.Active(now) || want.Active(now.Add(time.Hour)) {
				t.Error("active: wrong at its start or its expiry")
			}
			// Expired token IDs are swept; a fresh one never is.
			for i := range tokenPrune {
				s.UseToken(fmt.Sprintf("old-%d", i), now.Add(-time.Minute))
			}
			if fresh, _ := s.UseToken("old-1", now.Add(time.Minute)); !fresh {
				t.Error("an expired token ID was kept past a sweep")
			}
			if fresh, _ := s.UseToken("id-1", now.Add(time.Minute)); fresh {
				t.Error("a live token ID was swept")
			}
		})
	}
	// A restart (or a crash) forgets neither the used token nor the
	// session.
	first.Close()
	d := open(t, path, Options{})
	if fresh, err := d.UseToken("id-1", now.Add(time.Minute)); fresh || err != nil {
		t.Errorf("after reopening, a used token is fresh again: %v %v", fresh, err)
	}
	if got, ok := d.Session("lab/a"); !ok || got.Done != 1 || got.DoneSeq != 99 {
		t.Errorf("after reopening: %+v %v", got, ok)
	}
}

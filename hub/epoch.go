package hub

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// storeEpoch is what a forwarder keeps beside its site's status store
// (Forwarder.EpochFile): the store's identity, and how far the hub has
// acknowledged it. A store that was wiped and made anew numbers its events
// from 1 again: the forwarder sees a sequence at or below Sent waiting in
// the outbox and takes a new epoch, so the hub starts a new sequence for
// the site instead of dropping what the new store sends as resends.
type storeEpoch struct {
	Epoch string `json:"epoch"`
	// Sent is the highest store sequence the hub acknowledged (written
	// after the outbox dropped it: never ahead of the outbox).
	Sent uint64 `json:"sent"`
}

// newEpoch is a random epoch: 128 bits, hex.
func newEpoch() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// loadEpoch reads file, or makes a new epoch and writes it there (synced:
// nothing is sent under an epoch that a crash could forget).
func loadEpoch(file string) (storeEpoch, bool, error) {
	var e storeEpoch
	b, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return e, false, err
	default:
		if json.Unmarshal(b, &e) == nil && e.Epoch != "" && ValidEpoch(e.Epoch) {
			return e, false, nil
		}
		// Unreadable: a new epoch is safe (the hub starts a new sequence);
		// the old one could drop the store's events as resends.
	}
	e = storeEpoch{Epoch: newEpoch()}
	return e, true, saveEpoch(file, e, true)
}

// saveEpoch writes e to file (through a temporary file and a rename);
// sync also syncs it.
func saveEpoch(file string, e storeEpoch, sync bool) error {
	b, _ := json.Marshal(e)
	tmp := file + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("hub: the status store's epoch: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("hub: the status store's epoch: %w", err)
	}
	if sync {
		if d, err := os.Open(filepath.Dir(file)); err == nil {
			d.Sync()
			d.Close()
		}
	}
	return nil
}

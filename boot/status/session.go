package status

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/bootops/bootops/plan"
)

// Session is what an agent's check-in opened for one machine (a node, or
// an unknown machine's key): the workflow it was given and how far the
// agent has reported it done. A machine has one current session; a newer
// check-in replaces it, and the older session's credential stops working.
type Session struct {
	ID         string `json:"id"`
	Generation int    `json:"generation"`
	// Steps is the workflow's length; Need how many of its actions must
	// be done, in order, before "provisioned" may be reported (those
	// before the first reboot, poweroff or kexec).
	Steps int `json:"steps"`
	Need  int `json:"need"`
	// Actions and Kinds are the workflow's action names and kinds, in
	// order: an event names its step's action (by name or kind), or none
	// (QA verdicts are kept by name).
	Actions []string `json:"actions,omitempty"`
	Kinds   []string `json:"kinds,omitempty"`
	// Retire: the workflow is a retirement's (it ends retired, not
	// provisioned).
	Retire bool `json:"retire,omitempty"`
	// Commission names the QA of a held node's commissioning workflow
	// (it ends commissioned, not provisioned): a digest of its actions.
	Commission string `json:"commission,omitempty"`
	// Done counts the actions reported done, in order; DoneSeq is the
	// agent Seq of the newest event that moved the session (a resent
	// batch at or below it is not checked again).
	Done        int    `json:"done"`
	DoneSeq     uint64 `json:"doneSeq,omitempty"`
	Provisioned bool   `json:"provisioned,omitempty"`
	// Install is what the workflow the session was given installs, and
	// Revision the Git revision it came from.
	Install  *plan.Install `json:"install,omitempty"`
	Revision string        `json:"revision,omitempty"`
	// ReportKey is the public area (base64) of the TPM attestation key
	// the check-in proved ("" without a TPM): the install's "provisioned"
	// event carries it, and its reports must be quoted by it.
	ReportKey string `json:"reportKey,omitempty"`
	// Unproven: the check-in that opened it proved nothing of the
	// machine (by its identity, no TPM, no credential); a remote site's
	// node asking again with it stays held.
	Unproven bool `json:"unproven,omitempty"`
	// Peer is the address the check-in came from.
	Peer    string    `json:"peer,omitempty"`
	Started time.Time `json:"started"`
	Expires time.Time `json:"expires"`
}

// Active reports whether the session may still post events at now and has
// not reached its end (provisioned).
func (s Session) Active(now time.Time) bool {
	return s.ID != "" && !s.Provisioned && now.Before(s.Expires)
}

// tokenPrune is how many uses of boot tokens pass between two sweeps of
// the expired ones.
const tokenPrune = 256

// MemorySessions keeps sessions and used boot tokens in memory (tests, and
// a daemon without a state folder): a restart forgets them.
type MemorySessions struct {
	Now func() time.Time

	mu       sync.Mutex
	tokens   map[string]time.Time
	sessions map[string]Session
	uses     int
}

// UseToken records a boot token's ID as used; false when it already was.
func (m *MemorySessions) UseToken(id string, expires time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tokens == nil {
		m.tokens = map[string]time.Time{}
	}
	if _, ok := m.tokens[id]; ok {
		return false, nil
	}
	m.tokens[id] = expires
	if m.uses++; m.uses%tokenPrune == 0 {
		now := time.Now()
		if m.Now != nil {
			now = m.Now()
		}
		for k, exp := range m.tokens {
			if now.After(exp) {
				delete(m.tokens, k)
			}
		}
	}
	return true, nil
}

// Session returns the machine's current session.
func (m *MemorySessions) Session(key string) (Session, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[key]
	return s, ok
}

// PutSession makes s the machine's current session.
func (m *MemorySessions) PutSession(key string, s Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sessions == nil {
		m.sessions = map[string]Session{}
	}
	m.sessions[key] = s
	return nil
}

// The Durable store keeps sessions and used boot tokens in the same file
// as the events, so a restart (or a crash) neither accepts a used token
// again nor forgets how far a workflow got:
//
//	tokens/<id>     the used boot token's expiry (unix seconds)
//	sessions/<key>  the machine's current Session as JSON
var (
	bucketTokens   = []byte("tokens")
	bucketSessions = []byte("sessions")
)

// UseToken records a boot token's ID as used, on disk, before it returns;
// false when it already was. Expired IDs are swept now and then: a token
// past its expiry is refused by its signature's check anyway.
func (d *Durable) UseToken(id string, expires time.Time) (bool, error) {
	fresh := false
	err := d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTokens)
		if b.Get([]byte(id)) != nil {
			return nil
		}
		fresh = true
		if err := b.Put([]byte(id), u64(uint64(expires.Unix()))); err != nil {
			return err
		}
		if d.tokenUses.Add(1)%tokenPrune != 0 {
			return nil
		}
		now := uint64(d.opt.Now().Unix())
		c := b.Cursor()
		for k, v := c.First(); k != nil; {
			if len(v) == 8 && binary.BigEndian.Uint64(v) < now {
				if err := c.Delete(); err != nil {
					return err
				}
				k, v = c.Seek(k)
				continue
			}
			k, v = c.Next()
		}
		return nil
	})
	return fresh, err
}

// Session returns the machine's current session.
func (d *Durable) Session(key string) (Session, bool) {
	var s Session
	ok := false
	d.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketSessions).Get([]byte(key)); v != nil {
			ok = json.Unmarshal(v, &s) == nil
		}
		return nil
	})
	return s, ok
}

// sweepSessions drops the expired sessions of unknown machines (keys
// site/unknown-…): their table grows with every machine that checks in and
// never registers. A node's session is kept for as long as the node.
func sweepSessions(b *bolt.Bucket, now time.Time) error {
	var gone [][]byte
	err := b.ForEach(func(k, v []byte) error {
		if !strings.Contains(string(k), "/unknown-") {
			return nil
		}
		var s Session
		if json.Unmarshal(v, &s) != nil || now.After(s.Expires) {
			gone = append(gone, bytes.Clone(k))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range gone {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// PutSession makes s the machine's current session, on disk before it
// returns.
func (d *Durable) PutSession(key string, s Session) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).Put([]byte(key), b)
	})
}

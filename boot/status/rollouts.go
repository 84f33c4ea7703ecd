package status

import (
	bolt "go.etcd.io/bbolt"
)

// bucketRollouts holds each rollout group's state (site/profile → JSON the
// rollout controller owns): which nodes it started for which install,
// and a halt. It is written before a node is touched, so a restart in
// the middle neither starts a node twice nor loses the halt.
var bucketRollouts = []byte("rollouts")

// PutRollout stores a group's state, committed to disk when it returns;
// nil state deletes it.
func (d *Durable) PutRollout(group string, state []byte) error {
	return d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRollouts)
		if state == nil {
			return b.Delete([]byte(group))
		}
		return b.Put([]byte(group), state)
	})
}

// Rollouts is every group's stored state.
func (d *Durable) Rollouts() (map[string][]byte, error) {
	out := map[string][]byte{}
	err := d.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRollouts).ForEach(func(k, v []byte) error {
			out[string(k)] = append([]byte(nil), v...)
			return nil
		})
	})
	return out, err
}

package compiler

import (
	"runtime"
	"sync"

	"github.com/bootops/bootops/plan"
)

// renderKey is everything a node's rendering depends on. Objects come from
// the content-keyed file cache, so the same pointers mean the same content.
type renderKey struct {
	node, site, profile, microOS *object
	profileName                  string
}

// renderCache keeps the rendered nodes of the last compilation; entries not
// used by a compilation are dropped at its end.
type renderCache struct {
	mu   sync.Mutex
	old  map[renderKey]*plan.Node
	used map[renderKey]*plan.Node
}

func (c *renderCache) get(k renderKey) *plan.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.old[k]
	if n != nil {
		c.used[k] = n
	}
	return n
}

func (c *renderCache) put(k renderKey, n *plan.Node) {
	c.mu.Lock()
	c.used[k] = n
	c.mu.Unlock()
}

// begin starts a compilation; end keeps only what it used.
func (c *renderCache) begin() { c.used = make(map[renderKey]*plan.Node, len(c.old)) }
func (c *renderCache) end()   { c.old, c.used = c.used, nil }

// parallel runs f(0…n-1) on every core.
func parallel(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				f(i)
			}
		}()
	}
	wg.Wait()
}

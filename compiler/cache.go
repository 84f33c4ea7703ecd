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

// renderCache keeps rendered nodes; an entry no compilation used is
// dropped at the end of that compilation (swept by generation, so a large
// cache is not rebuilt every time). It is used from one goroutine; a nil
// cache holds nothing.
type renderCache struct {
	gen     uint64
	entries map[renderKey]*renderEntry
}

type renderEntry struct {
	node *plan.Node
	gen  uint64
}

func (c *renderCache) get(k renderKey) *plan.Node {
	if c == nil {
		return nil
	}
	e := c.entries[k]
	if e == nil {
		return nil
	}
	e.gen = c.gen
	return e.node
}

func (c *renderCache) put(k renderKey, n *plan.Node) {
	if c != nil {
		c.entries[k] = &renderEntry{node: n, gen: c.gen}
	}
}

// begin starts a compilation; end drops what it did not use.
func (c *renderCache) begin() {
	c.gen++
	if c.entries == nil {
		c.entries = map[renderKey]*renderEntry{}
	}
}

func (c *renderCache) end() {
	for k, e := range c.entries {
		if e.gen != c.gen {
			delete(c.entries, k)
		}
	}
}

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

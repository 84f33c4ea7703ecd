package udpserve

// Lanes queue a server's packets for its workers in two lanes, each
// bounded: a registered node's packets go in the first, everything else in
// the second, and a worker takes from the second only when the first is
// empty. A flood of unknown clients fills its own lane (what does not fit is
// dropped; the client retransmits) while nodes the plan knows are answered
// first, whatever the pool's load.
type Lanes[T any] struct {
	first, rest chan T
}

// NewLanes makes lanes of n packets each.
func NewLanes[T any](n int) *Lanes[T] {
	return &Lanes[T]{first: make(chan T, n), rest: make(chan T, n)}
}

// Put queues p, in the first lane when first; false when that lane is full.
func (l *Lanes[T]) Put(p T, first bool) bool {
	lane := l.rest
	if first {
		lane = l.first
	}
	select {
	case lane <- p:
		return true
	default:
		return false
	}
}

// Close ends the lanes: Next returns what is queued, then false.
func (l *Lanes[T]) Close() {
	close(l.first)
	close(l.rest)
}

// Next is the next packet, the first lane's if it has one; false once the
// lanes are closed and empty.
func (l *Lanes[T]) Next() (T, bool) {
	first, rest := l.first, l.rest
	for first != nil || rest != nil {
		select {
		case p, ok := <-first:
			if ok {
				return p, true
			}
			first = nil
			continue
		default:
		}
		select {
		case p, ok := <-first:
			if ok {
				return p, true
			}
			first = nil
		case p, ok := <-rest:
			if ok {
				return p, true
			}
			rest = nil
		}
	}
	var zero T
	return zero, false
}

package probe

import (
	"sync"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
)

// reportBatch is the most reports sent in one Reports message.
const reportBatch = 1024

type report struct {
	observed  *stepdv1.ObservedReport
	enlighten *stepdv1.EnlightenReport
	trace     *stepdv1.TraceReport
}

// reportBuffer is a bounded ring of reports waiting to be sent. When it is
// full the oldest report is dropped and counted.
type reportBuffer struct {
	mu      sync.Mutex
	ring    []report
	head    int // index of the oldest
	n       int
	dropped uint64
	total   uint64 // every report ever dropped, for Stats
}

func (b *reportBuffer) init(size int) { b.ring = make([]report, size) }

// push adds r and reports whether the buffer holds a batch's worth, and
// whether it was empty before (so a flush must be scheduled).
func (b *reportBuffer) push(r report) (full, first bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	first = b.n == 0
	if b.n == len(b.ring) {
		b.ring[b.head] = report{}
		b.head = (b.head + 1) % len(b.ring)
		b.n--
		b.dropped++
		b.total++
	}
	b.ring[(b.head+b.n)%len(b.ring)] = r
	b.n++
	return b.n >= reportBatch, first
}

func (b *reportBuffer) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

func (b *reportBuffer) addDropped(n uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropped += n
	b.total += n
}

// take removes up to max reports as one batch, with the drops since the
// previous batch; false when there is nothing to send.
func (b *reportBuffer) take(max int) (*stepdv1.Reports, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == 0 && b.dropped == 0 {
		return nil, false
	}
	batch := &stepdv1.Reports{Dropped: b.dropped}
	b.dropped = 0
	for i := 0; i < max && b.n > 0; i++ {
		r := b.ring[b.head]
		b.ring[b.head] = report{}
		b.head = (b.head + 1) % len(b.ring)
		b.n--
		switch {
		case r.observed != nil:
			batch.Observed = append(batch.Observed, r.observed)
		case r.enlighten != nil:
			batch.Enlighten = append(batch.Enlighten, r.enlighten)
		case r.trace != nil:
			batch.Trace = append(batch.Trace, r.trace)
		}
	}
	return batch, true
}

// Stats are counters of a probe.
type Stats struct {
	// ReportsDropped counts the reports dropped because the buffer was full
	// (each one reported to the daemon in Reports.dropped).
	ReportsDropped uint64
	// ReportsPending counts the reports waiting to be sent.
	ReportsPending int
}

// Stats returns the probe's counters.
func (p *Probe) Stats() Stats {
	if p == nil {
		return Stats{}
	}
	p.reports.mu.Lock()
	defer p.reports.mu.Unlock()
	return Stats{ReportsDropped: p.reports.total, ReportsPending: p.reports.n}
}

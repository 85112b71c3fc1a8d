package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
)

// ----- scopes -------------------------------------------------------------------

// scope is one open scope. Its count is the number of points hit in it so
// far (nested ones included), shared by the goroutines that carry it.
type scope struct {
	name   string
	parent *scope
	depth  int
	count  atomic.Int32
	ended  atomic.Bool
}

type scopeKey struct{ p *Probe }

func (p *Probe) scopeOf(ctx context.Context) *scope {
	if ctx == nil {
		return nil
	}
	s, _ := ctx.Value(scopeKey{p}).(*scope)
	return s
}

// Scope opens a scope named name inside the scopes ctx carries. Points
// reached with the returned context are inside it: their depth is the number
// of open scopes around them and their coordinate counts the points hit in
// each. Call end when the scope is left (end is idempotent):
//
//	ctx, end := p.Scope(ctx, "turn")
//	defer end()
//
// Goroutines that carry different contexts have their own scope stacks.
func (p *Probe) Scope(ctx context.Context, name string) (context.Context, func()) {
	if p == nil {
		return ctx, func() {}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	parent := p.scopeOf(ctx)
	s := &scope{name: name, parent: parent, depth: 1}
	if parent != nil {
		s.depth = parent.depth + 1
	}
	return context.WithValue(ctx, scopeKey{p}, s), func() {
		if s.ended.Swap(true) {
			return
		}
		// NONE holds nowhere while the depth is at least Armed.depth; leaving
		// a scope below it switches the probe back to its breakpoints.
		// DEPTH (OUT): the scope the hold was in has ended, so the next
		// point holds wherever it is. Only in the request the mode is about:
		// another request's scopes are none of its business.
		if a := p.armed.Load(); a != nil && s.depth-1 < a.depth && a.appliesTo(ctx) {
			switch a.mode {
			case stepdv1.ProbeMode_PROBE_MODE_NONE:
				p.armed.CompareAndSwap(a, a.withMode(stepdv1.ProbeMode_PROBE_MODE_BREAKPOINTS))
			case stepdv1.ProbeMode_PROBE_MODE_DEPTH:
				p.armed.CompareAndSwap(a, a.withMode(stepdv1.ProbeMode_PROBE_MODE_STEP))
			}
		}
	}
}

func (s *scope) path() []string {
	if s == nil {
		return nil
	}
	out := make([]string, s.depth)
	for c := s; c != nil; c = c.parent {
		out[c.depth-1] = c.name
	}
	return out
}

// tick counts a point: it fills coor (outermost first) and increments the
// counters of every open scope (or the depth-0 index).
func (p *Probe) tick(s *scope, coor []int32) []int32 {
	if s == nil {
		return append(coor, p.top.Add(1)-1)
	}
	coor = coor[:0]
	for range s.depth {
		coor = append(coor, 0)
	}
	for c := s; c != nil; c = c.parent {
		coor[c.depth-1] = c.count.Add(1) - 1
	}
	return coor
}

// peek is the coordinate the next point would have, without counting it.
func (p *Probe) peek(s *scope) []int32 {
	if s == nil {
		return []int32{p.top.Load()}
	}
	coor := make([]int32, s.depth)
	for c := s; c != nil; c = c.parent {
		coor[c.depth-1] = c.count.Load()
	}
	return coor
}

// ----- hold options ---------------------------------------------------------------

// HoldOption describes a held point further.
type HoldOption func(*holdConfig)

type holdConfig struct {
	editable bool
	schema   map[string]any
	typeHint string
	eval     func(code string) (string, error)
	locals   map[string]any
	// traceparent replaces the span of the hold's ctx when set.
	traceparent *string
}

// Editable lets a client replace the value (INJECT).
func Editable() HoldOption { return func(c *holdConfig) { c.editable = true } }

// Schema is a JSON Schema for the value; the daemon refuses INJECT values
// that do not fit (the pause stays). It implies Editable.
func Schema(schema map[string]any) HoldOption {
	return func(c *holdConfig) { c.schema = schema; c.editable = true }
}

// TypeHint names the value's type (e.g. "dict", "str", "list", "int"); the
// daemon refuses INJECT values of another type. It implies Editable.
func TypeHint(hint string) HoldOption {
	return func(c *holdConfig) { c.typeHint = hint; c.editable = true }
}

// Evaluator evaluates EVAL code at this point instead of Options.Eval (a
// closure over the caller's variables is Go's "caller's frame"). The hold
// offers EVAL even when Options.Eval is nil.
func Evaluator(eval func(code string) (string, error)) HoldOption {
	return func(c *holdConfig) { c.eval = eval }
}

// Traceparent names the span the hold's pause is a child of, instead of the
// OpenTelemetry span in the hold's ctx ("": none).
func Traceparent(traceparent string) HoldOption {
	return func(c *holdConfig) { c.traceparent = &traceparent }
}

// Locals are variables shown with the pause.
func Locals(locals map[string]any) HoldOption {
	return func(c *holdConfig) { c.locals = locals }
}

// ----- points ---------------------------------------------------------------------

// outcome of a point.
type outcome struct {
	decision stepdv1.ResumeDecision
	value    *structpb.Value
}

// Hold marks a pause point of kind and name holding value. When the point is
// armed (a breakpoint matches, step mode, ...) the goroutine waits until a
// client decides; otherwise it goes on at once, without any network round
// trip. It returns the value to go on with: value itself, or the replacement
// a client injected (decoded from JSON: map[string]any, []any, string,
// float64, bool or nil). The error is ErrSkipped (do not perform the held
// call), ErrStopped (stop), or ctx's error when ctx ends while held; the
// hold is then withdrawn, so its pause resolves with by "withdrawn" and no
// client can answer it any more. A hold in progress when the stream drops
// keeps waiting and is re-reported after the probe reconnects (see
// Options.ReleaseOnDisconnect and Options.ReconnectDeadline).
func (p *Probe) Hold(ctx context.Context, kind, name string, value any, opts ...HoldOption) (any, error) {
	if p == nil {
		return value, nil
	}
	a := p.armed.Load()
	if a == nil {
		return value, nil
	}
	out, err := p.point(ctx, a, kind, name, value, "", opts)
	if err != nil {
		return value, err
	}
	return p.apply(out, value)
}

func (p *Probe) apply(out *outcome, value any) (any, error) {
	if out == nil {
		return value, nil
	}
	switch out.decision {
	case stepdv1.ResumeDecision_RESUME_DECISION_REPLACE:
		return out.value.AsInterface(), nil
	case stepdv1.ResumeDecision_RESUME_DECISION_SKIP:
		return value, ErrSkipped
	case stepdv1.ResumeDecision_RESUME_DECISION_STOP:
		return value, ErrStopped
	}
	return value, nil
}

// HoldAs is [Probe.Hold] for a typed value. An injected replacement is
// merged into value as a JSON merge patch (RFC 7386) and the result decoded
// into a T through encoding/json: an object replaces only the fields it
// names (recursively, for nested objects), a field set to null goes back to
// its zero value, and anything else (an array, a string, a number) replaces
// the value whole. So `{"cmd": "pwd"}` changes Cmd and keeps every other
// field; fields encoding/json does not carry (unexported, `json:"-"`) come
// back zero after an injection. A replacement that does not decode leaves
// value unchanged and returns the decoding error.
func HoldAs[T any](ctx context.Context, p *Probe, kind, name string, value T, opts ...HoldOption) (T, error) {
	if p == nil {
		return value, nil
	}
	a := p.armed.Load()
	if a == nil {
		return value, nil
	}
	out, err := p.point(ctx, a, kind, name, value, "", opts)
	if err != nil {
		return value, err
	}
	if out == nil || out.decision != stepdv1.ResumeDecision_RESUME_DECISION_REPLACE {
		_, err := p.apply(out, value)
		return value, err
	}
	merged, err := mergePatch(value, out.value.AsInterface())
	if err != nil {
		return value, fmt.Errorf("stepd probe: the injected value: %w", err)
	}
	var replaced T
	if err := json.Unmarshal(merged, &replaced); err != nil {
		return value, fmt.Errorf("stepd probe: the injected value does not fit %T: %w", value, err)
	}
	return replaced, nil
}

// mergePatch is value's JSON with patch applied as an RFC 7386 merge patch.
func mergePatch(value any, patch any) ([]byte, error) {
	if _, ok := patch.(map[string]any); !ok {
		return json.Marshal(patch)
	}
	b, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	var target any
	if err := json.Unmarshal(b, &target); err != nil {
		return nil, err
	}
	return json.Marshal(applyPatch(target, patch))
}

func applyPatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
		} else {
			t[k] = applyPatch(t[k], v)
		}
	}
	return t
}

// OnError is an exception-only point: it holds only when err is not nil (and
// the point is armed), with err's message as the pause's caught_msg. It
// returns the error to go on with: err itself after CONTINUE; after INJECT,
// nil for a null or empty replacement, else an error with the replacement's
// text; ErrSkipped or ErrStopped (wrapping err) for SKIP and QUIT.
func (p *Probe) OnError(ctx context.Context, kind, name string, err error) error {
	if err == nil || p == nil {
		return err
	}
	a := p.armed.Load()
	if a == nil {
		return err
	}
	out, ctxErr := p.point(ctx, a, kind, name, err.Error(), err.Error(), []HoldOption{Editable()})
	if ctxErr != nil || out == nil {
		return err
	}
	switch out.decision {
	case stepdv1.ResumeDecision_RESUME_DECISION_REPLACE:
		switch v := out.value.AsInterface().(type) {
		case nil:
			return nil
		case string:
			if v == "" {
				return nil
			}
			return errors.New(v)
		default:
			b, _ := out.value.MarshalJSON()
			return errors.New(string(b))
		}
	case stepdv1.ResumeDecision_RESUME_DECISION_SKIP:
		return fmt.Errorf("%w: %w", ErrSkipped, err)
	case stepdv1.ResumeDecision_RESUME_DECISION_STOP:
		return fmt.Errorf("%w: %w", ErrStopped, err)
	}
	return err
}

// point decides locally whether the point holds; when it does it sends a
// Hit and waits for the Resume. A nil outcome means "go on unchanged".
func (p *Probe) point(ctx context.Context, a *arming, kind, name string, value any, exception string, opts []HoldOption) (*outcome, error) {
	s := p.scopeOf(ctx)
	depth := 0
	if s != nil {
		depth = s.depth
	}
	var buf [8]int32
	coor := p.tick(s, buf[:0])
	pt := point{kind: kind, name: name, value: value, labels: p.labels, ctx: ctx}
	var idBuf [4]string
	v, a, ids := p.decide(a, depth, coor, &pt, idBuf[:0])
	switch v {
	case pass:
		return nil, nil
	case trace:
		p.traceReport(s, slices.Clone(coor), &pt, opts)
		return nil, nil
	}
	return p.hold(ctx, a, s, slices.Clone(coor), &pt, slices.Clone(ids), exception, opts)
}

// decide is the table of docs/probes.md: whether a point at depth with coor
// holds under a, and the ids of the matchers that matched. NONE switches the
// probe back to BREAKPOINTS once the point is above its depth; the arming
// the decision was made under is returned. The ids are those of every
// matcher that matches the point whenever breakpoints are honoured, whatever
// made it hold (clients/testdata/decisions.json is the shared table).
func (p *Probe) decide(a *arming, depth int, coor []int32, pt *point, ids []string) (verdict, *arming, []string) {
	if len(a.scope) > 0 && !pt.bag.carries(pt.ctx, a.scope) {
		// The mode is about another request: this one holds only at its
		// breakpoints, as in BREAKPOINTS mode.
		pt.outside = true
		if ids = a.matching(pt, ids); len(ids) > 0 {
			return hold, a, ids
		}
		return pass, a, ids
	}
	for {
		switch a.mode {
		case stepdv1.ProbeMode_PROBE_MODE_STEP:
			if a.honour {
				ids = a.matching(pt, ids)
			}
			return hold, a, ids
		case stepdv1.ProbeMode_PROBE_MODE_DEPTH:
			if a.honour {
				ids = a.matching(pt, ids)
			}
			if depth < a.depth || len(ids) > 0 {
				return hold, a, ids
			}
			return pass, a, ids
		case stepdv1.ProbeMode_PROBE_MODE_NONE:
			if depth >= a.depth {
				return pass, a, ids
			}
			// The scope CONTINUE_ALL / CONTINUE_SCOPE was about has ended.
			b := a.withMode(stepdv1.ProbeMode_PROBE_MODE_BREAKPOINTS)
			if !p.armed.CompareAndSwap(a, b) {
				if b = p.armed.Load(); b == nil {
					return pass, a, ids
				}
			}
			a = b
		case stepdv1.ProbeMode_PROBE_MODE_TRACE:
			if ids = a.matching(pt, ids); len(ids) > 0 {
				return hold, a, ids
			}
			return trace, a, ids
		default: // BREAKPOINTS
			v := pass
			if len(a.target) > 0 {
				if slices.Equal(coor, a.target) {
					v = hold
				}
				if !a.honour {
					return v, a, ids
				}
			}
			if len(a.matchers) > 0 {
				if ids = a.matching(pt, ids); len(ids) > 0 {
					v = hold
				}
			}
			return v, a, ids
		}
	}
}

func pointInfo(s *scope, pt *point, labels map[string]string, cfg *holdConfig) *stepdv1.PointInfo {
	info := &stepdv1.PointInfo{
		Kind:      pt.kind,
		Name:      pt.name,
		Payload:   toProtoValue(pt.jsonVal()),
		Labels:    labels,
		ScopePath: s.path(),
	}
	if cfg != nil {
		info.Editable = cfg.editable
		info.TypeHint = cfg.typeHint
		if cfg.schema != nil {
			if st, err := structpb.NewStruct(cfg.schema); err == nil {
				info.Schema = st
			}
		}
	}
	return info
}

func (p *Probe) traceReport(s *scope, coor []int32, pt *point, opts []HoldOption) {
	var cfg holdConfig
	for _, o := range opts {
		o(&cfg)
	}
	// Where the point is, read now: the caller moves on before the batch is sent.
	var at *stepdv1.Location
	if frames := stack(); len(frames) > 0 {
		at = frames[0]
	}
	p.enqueue(report{trace: &stepdv1.TraceReport{
		Point:    pointInfo(s, pt, p.labels, &cfg),
		Coor:     coor,
		Time:     timestamppb.Now(),
		Location: at,
	}})
}

func (p *Probe) enqueue(r report) {
	full, first := p.reports.push(r)
	if full {
		signal(p.kick)
	}
	if first {
		// Safe from any goroutine: a timer's Reset discards a fire the
		// writer has not received yet.
		p.flushTimer.Reset(p.opts.FlushInterval)
	}
}

// signal wakes the writer without ever waiting for it.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// hold sends the Hit and waits for its Resume.
func (p *Probe) hold(ctx context.Context, a *arming, s *scope, coor []int32, pt *point, ids []string, exception string, opts []HoldOption) (*outcome, error) {
	var cfg holdConfig
	for _, o := range opts {
		o(&cfg)
	}
	hitID := "h" + strconv.FormatUint(p.hitSeq.Add(1), 10)
	hit := &stepdv1.Hit{
		HitId:            hitID,
		Point:            pointInfo(s, pt, p.labels, &cfg),
		Coor:             coor,
		ExceptionMessage: exception,
		BreakpointIds:    ids,
		// A per-hold evaluator offers EVAL even when Options.Eval is nil.
		Evaluable:           cfg.eval != nil,
		OutsideRequestScope: pt.outside,
	}
	if cfg.traceparent != nil {
		hit.Traceparent = *cfg.traceparent
	} else {
		hit.Traceparent, hit.Tracestate = traceContext(ctx)
	}
	hit.Stack = stack()
	if len(hit.Stack) > 0 {
		hit.Location = hit.Stack[0]
	}
	for k, v := range cfg.locals {
		hit.Locals = append(hit.Locals, &stepdv1.Local{Name: k, Value: display(v)})
	}
	slices.SortFunc(hit.Locals, func(x, y *stepdv1.Local) int { return strings.Compare(x.Name, y.Name) })

	w := &waiter{ch: make(chan *stepdv1.Resume, 1), eval: cfg.eval, hit: hit, since: time.Now()}
	p.mu.Lock()
	c := p.conn
	if c == nil || c.gen != a.gen {
		// The connection this decision was made under is gone.
		p.mu.Unlock()
		return nil, nil
	}
	p.held[hitID] = w
	p.mu.Unlock()
	// When the stream is gone before the Hit leaves, the hold is kept (and
	// re-reported) or released like any other held at that moment.
	p.send(c, &stepdv1.ConnectRequest{Message: &stepdv1.ConnectRequest_Hit{Hit: hit}})
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	select {
	case r := <-w.ch:
		return resumeOutcome(r), nil
	case <-done:
		p.mu.Lock()
		_, waiting := p.held[hitID]
		if waiting {
			delete(p.held, hitID)
		}
		now := p.conn
		p.mu.Unlock()
		if !waiting {
			// The Resume (or the teardown's release) is already on its way:
			// the point was answered, so the answer is applied.
			return resumeOutcome(<-w.ch), nil
		}
		// Nobody waits for this hold any more: withdraw it, so the pause
		// resolves instead of offering answers that would change nothing
		// (while disconnected there is no pause to resolve).
		if now != nil {
			p.send(now, &stepdv1.ConnectRequest{Message: &stepdv1.ConnectRequest_Withdraw{
				Withdraw: &stepdv1.Withdraw{HitId: hitID},
			}})
		}
		return nil, ctx.Err()
	}
}

func resumeOutcome(r *stepdv1.Resume) *outcome {
	return &outcome{decision: r.GetDecision(), value: r.GetValue()}
}

// Observe reports a point that never holds (e.g. a skill loaded, a web
// source): it is buffered and sent in the background. When the buffer is
// full the oldest report is dropped and counted.
func (p *Probe) Observe(ctx context.Context, kind, name string, value any) {
	if p == nil {
		return
	}
	s := p.scopeOf(ctx)
	p.enqueue(report{observed: &stepdv1.ObservedReport{
		Kind:      kind,
		Name:      name,
		Value:     toProtoValue(toJSONValue(value)),
		ScopePath: s.path(),
		Coor:      p.peek(s),
		Time:      timestamppb.Now(),
	}})
}

// Enlighten reports a value to show beside the current coordinate.
func (p *Probe) Enlighten(ctx context.Context, value any, erasePrevious bool) {
	if p == nil {
		return
	}
	p.enqueue(report{enlighten: &stepdv1.EnlightenReport{
		Coor:          p.peek(p.scopeOf(ctx)),
		Value:         display(value).GetText(),
		ErasePrevious: erasePrevious,
	}})
}

// ----- values -----------------------------------------------------------------

func toProtoValue(v any) *structpb.Value {
	pv, err := structpb.NewValue(v)
	if err != nil {
		return structpb.NewStringValue(fmt.Sprint(v))
	}
	return pv
}

// jsonOrString is s decoded when it is JSON, else s.
func jsonOrString(s string) any {
	var v any
	if json.Unmarshal([]byte(s), &v) == nil {
		return v
	}
	return s
}

const displayLimit = 4096

func display(v any) *stepdv1.DisplayValue {
	var text string
	switch x := v.(type) {
	case string:
		text = x
	case fmt.Stringer:
		text = x.String()
	case error:
		text = x.Error()
	default:
		b, err := json.Marshal(v)
		if err != nil {
			text = fmt.Sprint(v)
		} else {
			text = string(b)
		}
	}
	d := &stepdv1.DisplayValue{Text: text, Type: fmt.Sprintf("%T", v)}
	if len(text) > displayLimit {
		d.Text, d.Truncated = text[:displayLimit], true
	}
	return d
}

const thisPackage = "github.com/stepd-dev/stepd/clients/go/probe."

// stack is the caller's stack, top first, without this package's frames.
func stack() []*stepdv1.Location {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var out []*stepdv1.Location
	for {
		f, more := frames.Next()
		fn := f.Function
		internal := strings.HasPrefix(fn, thisPackage) && !strings.Contains(fn[len(thisPackage):], "Test") && !strings.Contains(fn[len(thisPackage):], "Benchmark")
		if !internal && fn != "" && !strings.HasPrefix(fn, "runtime.") && !strings.HasPrefix(fn, "testing.") {
			module, name := readableFunc(fn)
			out = append(out, &stepdv1.Location{Path: f.File, Line: uint32(f.Line), Function: name, Module: module})
		}
		if !more {
			break
		}
	}
	return out
}

// readableFunc splits a runtime function symbol into the package's import
// path and the name as Go source spells it (docs/probes.md "Where a point
// is"): "main.(*T).m" is "T.m" in "main", "example.com/x/store.F[...]" is
// "store.F" in "example.com/x/store".
func readableFunc(symbol string) (module, name string) {
	slash := strings.LastIndexByte(symbol, '/')
	dot := strings.IndexByte(symbol[slash+1:], '.')
	if dot < 0 {
		return "", symbol
	}
	module, name = symbol[:slash+1+dot], symbol[slash+1+dot+1:]
	// The runtime escapes dots in the last path element ("yaml%2ev3").
	module = strings.ReplaceAll(module, "%2e", ".")
	name = strings.ReplaceAll(name, "[...]", "")
	var b strings.Builder
	for _, part := range strings.Split(name, ".") {
		part = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(part, "("), "*"), ")")
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(part)
	}
	name = b.String()
	if module != "main" {
		name = module[strings.LastIndexByte(module, '/')+1:] + "." + name
	}
	return module, name
}

package probe

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode"
)

// The condition language of probe breakpoints (docs/probe-conditions.md):
//
//	expr       := and ("||" and)*
//	and        := unary ("&&" unary)*
//	unary      := "!" unary | "(" expr ")" | comparison
//	comparison := operand [op operand]
//	op         := == | != | < | <= | > | >= | contains | matches
//	operand    := path | "string" | 'string' | number | true | false | null
//	path       := (value | name | kind | labels) ( .field | [index] | ["key"] )*
//
// Values are the JSON-like trees encoding/json decodes into any: nil, bool,
// float64, string, []any and map[string]any.
//
// The limits are the daemon's: a condition of at most maxConditionBytes,
// nested (each "(" and "!" is a level) at most maxConditionDepth deep.

const (
	// maxConditionBytes is the longest condition accepted, in bytes of UTF-8.
	maxConditionBytes = 4096
	// maxConditionDepth is the deepest nesting of "(" and "!" accepted: the
	// parser recurses once per level.
	maxConditionDepth = 32
)

type condExpr interface {
	eval(pt *condPoint) bool
}

type condPoint struct {
	kind, name string
	value      any
	labels     map[string]string
}

type (
	andExpr     struct{ a, b condExpr }
	orExpr      struct{ a, b condExpr }
	notExpr     struct{ e condExpr }
	truthyExpr  struct{ o operand }
	compareExpr struct {
		a, b operand
		op   string
		glob *glob // for matches
	}
)

func (e andExpr) eval(p *condPoint) bool    { return e.a.eval(p) && e.b.eval(p) }
func (e orExpr) eval(p *condPoint) bool     { return e.a.eval(p) || e.b.eval(p) }
func (e notExpr) eval(p *condPoint) bool    { return !e.e.eval(p) }
func (e truthyExpr) eval(p *condPoint) bool { return truthy(e.o.resolve(p)) }
func (e compareExpr) eval(p *condPoint) bool {
	a, b := e.a.resolve(p), e.b.resolve(p)
	switch e.op {
	case "==":
		return jsonEqual(a, b)
	case "!=":
		return !jsonEqual(a, b)
	case "<", "<=", ">", ">=":
		var c int
		switch x := a.(type) {
		case float64:
			y, ok := b.(float64)
			if !ok || math.IsNaN(x) || math.IsNaN(y) {
				return false
			}
			switch {
			case x < y:
				c = -1
			case x > y:
				c = 1
			}
		case string:
			y, ok := b.(string)
			if !ok {
				return false
			}
			c = strings.Compare(x, y) // byte order of UTF-8 is code point order
		default:
			return false
		}
		switch e.op {
		case "<":
			return c < 0
		case "<=":
			return c <= 0
		case ">":
			return c > 0
		default:
			return c >= 0
		}
	case "contains":
		switch x := a.(type) {
		case string:
			sub, ok := b.(string)
			return ok && strings.Contains(x, sub)
		case []any:
			for _, item := range x {
				if jsonEqual(item, b) {
					return true
				}
			}
			return false
		case map[string]any:
			key, ok := b.(string)
			if !ok {
				return false
			}
			_, has := x[key]
			return has
		}
		return false
	case "matches":
		s, ok := a.(string)
		return ok && e.glob != nil && e.glob.match(s)
	}
	return false
}

type step struct {
	key     string
	index   int
	isIndex bool
}

type operand struct {
	root    string // "" for a literal
	steps   []step
	literal any
}

func (o operand) resolve(p *condPoint) any {
	var cur any
	switch o.root {
	case "":
		return o.literal
	case "value":
		cur = p.value
	case "name":
		cur = p.name
	case "kind":
		cur = p.kind
	case "labels":
		m := make(map[string]any, len(p.labels))
		for k, v := range p.labels {
			m[k] = v
		}
		cur = m
	}
	for _, s := range o.steps {
		switch c := cur.(type) {
		case map[string]any:
			if s.isIndex {
				cur = nil
			} else {
				cur = c[s.key]
			}
		case []any:
			if s.isIndex && s.index < len(c) {
				cur = c[s.index]
			} else {
				cur = nil
			}
		default:
			cur = nil
		}
	}
	return cur
}

func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, has := y[k]
			if !has || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// ----- parsing ---------------------------------------------------------------

type tokKind uint8

const (
	tokIdent tokKind = iota
	tokStr
	tokNum
	tokOp
)

type token struct {
	kind tokKind
	text string
	num  float64
}

func (t token) String() string {
	switch t.kind {
	case tokStr:
		return strconv.Quote(t.text)
	case tokNum:
		return strconv.FormatFloat(t.num, 'g', -1, 64)
	}
	return strconv.Quote(t.text)
}

func tokenize(text string) ([]token, error) {
	chars := []rune(text)
	var tokens []token
	for i := 0; i < len(chars); {
		c := chars[i]
		if unicode.IsSpace(c) {
			i++
			continue
		}
		if i+1 < len(chars) {
			two := string(chars[i : i+2])
			switch two {
			case "==", "!=", "<=", ">=", "&&", "||":
				tokens = append(tokens, token{kind: tokOp, text: two})
				i += 2
				continue
			}
		}
		switch c {
		case '<', '>', '!', '(', ')', '[', ']', '.':
			tokens = append(tokens, token{kind: tokOp, text: string(c)})
			i++
			continue
		}
		if c == '"' || c == '\'' {
			var sb strings.Builder
			i++
			for {
				if i >= len(chars) {
					return nil, errors.New("unterminated string")
				}
				q := chars[i]
				if q == c {
					break
				}
				if q == '\\' {
					i++
					if i >= len(chars) {
						return nil, errors.New("unterminated string")
					}
					switch chars[i] {
					case 'n':
						sb.WriteRune('\n')
					case 't':
						sb.WriteRune('\t')
					default:
						sb.WriteRune(chars[i])
					}
				} else {
					sb.WriteRune(q)
				}
				i++
			}
			i++
			tokens = append(tokens, token{kind: tokStr, text: sb.String()})
			continue
		}
		if isDigit(c) || (c == '-' && i+1 < len(chars) && isDigit(chars[i+1])) {
			start := i
			i++
			for i < len(chars) && (isDigit(chars[i]) || chars[i] == '.' || chars[i] == 'e' || chars[i] == 'E') {
				i++
			}
			s := string(chars[start:i])
			n, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, fmt.Errorf("bad number %q", s)
			}
			tokens = append(tokens, token{kind: tokNum, num: n, text: s})
			continue
		}
		if unicode.IsLetter(c) || c == '_' {
			start := i
			for i < len(chars) && (unicode.IsLetter(chars[i]) || unicode.IsDigit(chars[i]) || chars[i] == '_') {
				i++
			}
			tokens = append(tokens, token{kind: tokIdent, text: string(chars[start:i])})
			continue
		}
		return nil, fmt.Errorf("unexpected character %q at offset %d", c, i)
	}
	return tokens, nil
}

func isDigit(c rune) bool { return c >= '0' && c <= '9' }

type condParser struct {
	tokens []token
	pos    int
	depth  int // how many "(" and "!" enclose the current position
}

// parseCondition compiles a condition; the error says what is wrong.
func parseCondition(text string) (condExpr, error) {
	if len(text) > maxConditionBytes {
		return nil, fmt.Errorf("the condition is longer than the limit of %d bytes", maxConditionBytes)
	}
	tokens, err := tokenize(text)
	if err != nil {
		return nil, err
	}
	p := &condParser{tokens: tokens}
	e, err := p.or()
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.tokens) {
		return nil, fmt.Errorf("unexpected %v after a complete condition", p.tokens[p.pos])
	}
	return e, nil
}

func (p *condParser) peek() (token, bool) {
	if p.pos < len(p.tokens) {
		return p.tokens[p.pos], true
	}
	return token{}, false
}

func (p *condParser) eat(op string) bool {
	if t, ok := p.peek(); ok && t.kind == tokOp && t.text == op {
		p.pos++
		return true
	}
	return false
}

func (p *condParser) or() (condExpr, error) {
	left, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.eat("||") {
		right, err := p.and()
		if err != nil {
			return nil, err
		}
		left = orExpr{left, right}
	}
	return left, nil
}

func (p *condParser) and() (condExpr, error) {
	left, err := p.unary()
	if err != nil {
		return nil, err
	}
	for p.eat("&&") {
		right, err := p.unary()
		if err != nil {
			return nil, err
		}
		left = andExpr{left, right}
	}
	return left, nil
}

// deeper enters one more level of "(" or "!", refusing past the limit
// before the recursion that would follow.
func (p *condParser) deeper() error {
	p.depth++
	if p.depth > maxConditionDepth {
		return fmt.Errorf("the condition nests deeper than the limit of %d levels", maxConditionDepth)
	}
	return nil
}

func (p *condParser) unary() (condExpr, error) {
	if p.eat("!") {
		if err := p.deeper(); err != nil {
			return nil, err
		}
		e, err := p.unary()
		if err != nil {
			return nil, err
		}
		p.depth--
		return notExpr{e}, nil
	}
	if p.eat("(") {
		if err := p.deeper(); err != nil {
			return nil, err
		}
		e, err := p.or()
		if err != nil {
			return nil, err
		}
		if !p.eat(")") {
			return nil, errors.New("missing ')'")
		}
		p.depth--
		return e, nil
	}
	left, err := p.operand()
	if err != nil {
		return nil, err
	}
	t, ok := p.peek()
	op := ""
	if ok {
		switch {
		case t.kind == tokOp:
			switch t.text {
			case "==", "!=", "<", "<=", ">", ">=":
				op = t.text
			}
		case t.kind == tokIdent && (t.text == "contains" || t.text == "matches"):
			op = t.text
		}
	}
	if op == "" {
		return truthyExpr{left}, nil
	}
	p.pos++
	right, err := p.operand()
	if err != nil {
		return nil, err
	}
	e := compareExpr{a: left, b: right, op: op}
	if op == "matches" {
		pattern, isString := right.literal.(string)
		if right.root != "" || !isString {
			return nil, errors.New("matches takes a string glob on its right")
		}
		g, err := compileGlob(pattern)
		if err != nil {
			return nil, fmt.Errorf("bad glob after matches: %v", err)
		}
		e.glob = g
	}
	return e, nil
}

func (p *condParser) operand() (operand, error) {
	t, ok := p.peek()
	if !ok {
		return operand{}, errors.New("the condition ends where a value is expected")
	}
	p.pos++
	switch t.kind {
	case tokStr:
		return operand{literal: t.text}, nil
	case tokNum:
		return operand{literal: t.num}, nil
	case tokOp:
		return operand{}, fmt.Errorf("unexpected %q where a value is expected", t.text)
	}
	switch t.text {
	case "true":
		return operand{literal: true}, nil
	case "false":
		return operand{literal: false}, nil
	case "null":
		return operand{literal: nil}, nil
	case "value", "name", "kind", "labels":
	default:
		return operand{}, fmt.Errorf("unknown name %q: paths start with value, name, kind or labels", t.text)
	}
	o := operand{root: t.text}
	for {
		switch {
		case p.eat("."):
			f, ok := p.peek()
			if !ok || f.kind != tokIdent {
				return operand{}, errors.New("a field name must follow '.'")
			}
			p.pos++
			o.steps = append(o.steps, step{key: f.text})
		case p.eat("["):
			f, ok := p.peek()
			switch {
			case ok && f.kind == tokNum && f.num >= 0 && f.num == math.Trunc(f.num):
				o.steps = append(o.steps, step{index: int(f.num), isIndex: true})
			case ok && f.kind == tokStr:
				o.steps = append(o.steps, step{key: f.text})
			default:
				return operand{}, errors.New("an index or a quoted key must follow '['")
			}
			p.pos++
			if !p.eat("]") {
				return operand{}, errors.New("missing ']'")
			}
		default:
			return o, nil
		}
	}
}

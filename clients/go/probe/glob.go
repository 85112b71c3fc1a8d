package probe

import (
	"errors"
	"fmt"
)

// glob is a compiled name pattern: `*`, `?`, `[...]`, `[!...]` (or `[^...]`)
// and `\` escapes, matched against the whole name. It is the daemon's glob,
// token for token.
type glob struct {
	tokens []globToken
	// literal is set when the pattern has no wildcard: matching is ==.
	literal    string
	isLiteral  bool
	matchesAll bool
}

type globKind uint8

const (
	globLiteral globKind = iota
	globAny
	globStar
	globClass
)

type globToken struct {
	kind    globKind
	lit     rune
	negated bool
	ranges  [][2]rune
}

// maxGlobBytes is the longest glob accepted, in bytes of UTF-8, as the
// daemon: matching costs at most the glob's length times the name's.
const maxGlobBytes = 1024

func compileGlob(pattern string) (*glob, error) {
	if len(pattern) > maxGlobBytes {
		return nil, fmt.Errorf("the glob is longer than the limit of %d bytes", maxGlobBytes)
	}
	chars := []rune(pattern)
	var tokens []globToken
	literal := true
	for i := 0; i < len(chars); i++ {
		c := chars[i]
		switch c {
		case '*':
			tokens = append(tokens, globToken{kind: globStar})
			literal = false
		case '?':
			tokens = append(tokens, globToken{kind: globAny})
			literal = false
		case '\\':
			i++
			if i >= len(chars) {
				return nil, errors.New("trailing '\\' escapes nothing")
			}
			tokens = append(tokens, globToken{kind: globLiteral, lit: chars[i]})
		case '[':
			literal = false
			i++
			negated := false
			if i < len(chars) && (chars[i] == '!' || chars[i] == '^') {
				negated = true
				i++
			}
			var ranges [][2]rune
			for {
				if i >= len(chars) {
					return nil, errors.New("unclosed '[' character class")
				}
				lo := chars[i]
				i++
				if lo == ']' {
					if len(ranges) == 0 {
						return nil, errors.New("empty '[]' character class")
					}
					i--
					break
				}
				if lo == '\\' {
					if i >= len(chars) {
						return nil, errors.New("trailing '\\' escapes nothing")
					}
					lo = chars[i]
					i++
				}
				hi := lo
				if i < len(chars) && chars[i] == '-' {
					i++
					if i >= len(chars) {
						return nil, errors.New("unclosed '[' character class")
					}
					if chars[i] == ']' {
						ranges = append(ranges, [2]rune{lo, lo}, [2]rune{'-', '-'})
						break
					}
					hi = chars[i]
					i++
					if hi < lo {
						return nil, fmt.Errorf("range '%c-%c' is reversed", lo, hi)
					}
				}
				ranges = append(ranges, [2]rune{lo, hi})
			}
			// i is at the closing ']'.
			tokens = append(tokens, globToken{kind: globClass, negated: negated, ranges: ranges})
		default:
			tokens = append(tokens, globToken{kind: globLiteral, lit: c})
		}
	}
	g := &glob{tokens: tokens}
	if literal {
		g.isLiteral = true
		lit := make([]rune, len(tokens))
		for i, t := range tokens {
			lit[i] = t.lit
		}
		g.literal = string(lit)
	}
	if len(tokens) == 1 && tokens[0].kind == globStar {
		g.matchesAll = true
	}
	return g, nil
}

// match reports whether the whole of name matches, in at most (tokens ×
// runes) steps: on a mismatch it backtracks only to the last star.
func (g *glob) match(name string) bool {
	if g.isLiteral {
		return name == g.literal
	}
	if g.matchesAll {
		return true
	}
	runes := []rune(name)
	t, n := 0, 0
	starT, starN := -1, 0
	for n < len(runes) {
		if t < len(g.tokens) {
			tok := &g.tokens[t]
			if tok.kind == globStar {
				starT, starN = t, n
				t++
				continue
			}
			if tok.single(runes[n]) {
				t++
				n++
				continue
			}
		}
		if starT < 0 {
			return false
		}
		t = starT + 1
		starN++
		n = starN
	}
	for ; t < len(g.tokens); t++ {
		if g.tokens[t].kind != globStar {
			return false
		}
	}
	return true
}

func (tok *globToken) single(c rune) bool {
	switch tok.kind {
	case globLiteral:
		return tok.lit == c
	case globAny:
		return true
	case globClass:
		in := false
		for _, r := range tok.ranges {
			if r[0] <= c && c <= r[1] {
				in = true
				break
			}
		}
		return in != tok.negated
	}
	return false
}

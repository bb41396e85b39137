package emulator

import (
	"fmt"
	"strings"
)

// token is one word of nft syntax. Newlines are tokens (nl) because they end rules and
// body lines; `{ } ; ,` are tokens of their own; a quoted string is one token (quoted,
// with its quotes removed in s). A `# handle N` comment becomes the tokens "handle" "N"
// marked hc; other comments are dropped.
type token struct {
	s      string
	line   int
	pos    int // byte offset of the token in the source
	end    int // byte offset after it
	nl     bool
	quoted bool
	hc     bool
}

// is reports whether t is the unquoted word w.
func (t token) is(w string) bool { return !t.quoted && !t.nl && t.s == w }

// lex splits nft text into tokens.
// wordEnd marks the bytes that end a word.
var wordEnd = func() (t [256]bool) {
	for _, c := range " \t\r\n{};,\"#" {
		t[c] = true
	}
	return t
}()

func lex(src string, file string) ([]token, error) {
	toks := make([]token, 0, len(src)/6+16)
	line := 1
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == '\n':
			toks = append(toks, token{s: "\n", line: line, pos: i, end: i + 1, nl: true})
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case c == '\\' && i+1 < len(src) && src[i+1] == '\n':
			i += 2
			line++
		case c == '#':
			j := strings.IndexByte(src[i:], '\n')
			if j < 0 {
				j = len(src) - i
			}
			f := strings.Fields(src[i+1 : i+j])
			if len(f) == 2 && f[0] == "handle" && f[1] != "" && strings.Trim(f[1], "0123456789") == "" {
				toks = append(toks, token{s: "handle", line: line, pos: i, end: i, hc: true},
					token{s: f[1], line: line, pos: i, end: i + j, hc: true})
			}
			i += j
		case c == '{' || c == '}' || c == ';' || c == ',':
			toks = append(toks, token{s: src[i : i+1], line: line, pos: i, end: i + 1})
			i++
		case c == '"':
			j := i + 1
			for j < len(src) && src[j] != '"' {
				if src[j] == '\\' && j+1 < len(src) {
					j++
				}
				if src[j] == '\n' {
					return nil, fmt.Errorf("%s:%d: unterminated string", file, line)
				}
				j++
			}
			if j >= len(src) {
				return nil, fmt.Errorf("%s:%d: unterminated string", file, line)
			}
			toks = append(toks, token{s: src[i+1 : j], line: line, pos: i, end: j + 1, quoted: true})
			i = j + 1
		default:
			j := i
			for j < len(src) && !wordEnd[src[j]] {
				if src[j] == '\\' && j+1 < len(src) && src[j+1] == '\n' {
					break
				}
				if src[j] < 0x20 || src[j] == 0x7f || src[j] == '\\' {
					// nft's scanner has no rule for other control characters (a
					// form feed is not a blank to it) nor for a backslash but
					// before a line end: "unexpected junk".
					return nil, fmt.Errorf("%s:%d: invalid character %q", file, line, src[j])
				}
				j++
			}
			toks = append(toks, token{s: src[i:j], line: line, pos: i, end: j})
			i = j
		}
	}
	return toks, nil
}

// span returns the source text of toks, whitespace runs that hold a newline folded to
// one space.
func span(src string, toks []token) string {
	if len(toks) == 0 {
		return ""
	}
	s := src[toks[0].pos:toks[len(toks)-1].end]
	if strings.ContainsAny(s, "\n\\") {
		if strings.IndexByte(s, '#') >= 0 {
			s = dropComments(s) // folded onto one line, a comment would swallow the rest
		}
		s = strings.ReplaceAll(s, "\\\n", " ")
		s = strings.Join(strings.Fields(s), " ")
	}
	return s
}

// dropComments removes the comments of s: from a '#' outside a string to the line's end.
func dropComments(s string) string {
	var b strings.Builder
	inStr := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inStr && c == '\\' && i+1 < len(s):
			b.WriteByte(c)
			i++
			c = s[i]
		case c == '"':
			inStr = !inStr
		case c == '#' && !inStr:
			for i < len(s) && s[i] != '\n' {
				i++
			}
			if i == len(s) {
				return b.String()
			}
			c = '\n'
		}
		b.WriteByte(c)
	}
	return b.String()
}

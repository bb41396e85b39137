package emulator

import (
	"fmt"
	"strings"
)

// token is one word of a rule line after iptables-restore's splitting.
type token struct {
	val    string // the word with quotes removed and escapes resolved
	raw    string // the word as written
	quoted bool   // some part was inside double quotes
}

// wordEnd marks the bytes that end a plain word: blanks, line ends and a quote.
var wordEnd = [256]bool{' ': true, '\t': true, '"': true, '\n': true, '\r': true}

// tokenize splits a line as iptables-restore does: words are separated by spaces and
// tabs; a double quote opens a quoted part in which spaces are kept and a backslash
// escapes the next character; a closing quote ends the word. Single quotes and
// backslashes outside double quotes are ordinary characters.
func tokenize(line string, toks []token) ([]token, error) {
	toks = toks[:0]
	i, n := 0, len(line)
	for i < n {
		c := line[i]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			i++
			continue
		}
		start := i
		// Fast path: a plain word.
		j := i
		for j < n && !wordEnd[line[j]] {
			j++
		}
		if j == n || line[j] != '"' {
			toks = appendWord(toks, line[i:j])
			i = j
			continue
		}
		// A word with a quoted part. iptables-restore ends the word at the closing quote.
		prefix := line[i:j]
		j++ // opening quote
		k := j
		simple := true
		for k < n && line[k] != '"' {
			if line[k] == '\\' {
				simple = false
				k += 2
				continue
			}
			k++
		}
		if k >= n {
			return toks, fmt.Errorf("unterminated quoted string starting at column %d", start+1)
		}
		var val string
		if simple {
			if prefix == "" {
				val = line[j:k]
			} else {
				val = prefix + line[j:k]
			}
		} else {
			var b strings.Builder
			b.WriteString(prefix)
			for m := j; m < k; m++ {
				if line[m] == '\\' {
					m++
				}
				b.WriteByte(line[m])
			}
			val = b.String()
		}
		toks = append(toks, token{val: val, raw: line[start : k+1], quoted: true})
		i = k + 1
	}
	return toks, nil
}

// appendWord appends a plain word's token (val and raw both w). It writes the fields
// one by one: appending a token literal copies the whole struct with the GC's bulk
// write barrier (typedmemmove) whenever a collection is marking, which a 10,000-Service
// restore's 8 million tokens made a third of tokenize's time.
func appendWord(toks []token, w string) []token {
	n := len(toks)
	if n == cap(toks) {
		toks = append(toks, token{})
	} else {
		toks = toks[:n+1]
	}
	t := &toks[n]
	t.val, t.raw, t.quoted = w, w, false
	return toks
}

// saveString appends s as xtables_save_string prints it: bare when it is non-empty and
// made only of letters, digits, '-' and '_'; otherwise in double quotes with '"', '\' and
// '\” escaped by a backslash.
func saveString(b []byte, s string) []byte {
	bare := s != ""
	for i := 0; i < len(s) && bare; i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			bare = false
		}
	}
	if bare {
		return append(b, s...)
	}
	return quoteString(b, s)
}

// quoteString appends s in double quotes with '"', '\' and '\” escaped.
func quoteString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"', '\\', '\'':
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

package planner

import "strings"

// The plan cache is keyed by a statement's shape: its text with every
// literal replaced by a placeholder. pg_query's own Normalize and
// Fingerprint cost a full parse, which is what the cache exists to avoid, so
// this file holds a small scanner that follows Postgres's lexer (scan.l)
// exactly where token boundaries are concerned and flags ("odd") every input
// whose boundaries it does not model; odd inputs are cached by their exact
// text only.

// LiteralClass says how a literal token is written.
type LiteralClass uint8

// Literal classes. The class is part of a statement's shape: 42 and '42'
// route differently, and so must not share a cached plan.
const (
	IntegerLiteral       LiteralClass = iota + 1 // decimal digits: 42
	NumericLiteral                               // a number with a point or exponent: 4.2, 1e3
	StringLiteral                                // a standard string: 'it''s'
	EscapeStringLiteral                          // E'...'
	BitStringLiteral                             // B'...'
	HexStringLiteral                             // X'...'
	UnicodeStringLiteral                         // U&'...'
	DollarStringLiteral                          // $$...$$, $tag$...$tag$
)

var classNames = [...]string{
	IntegerLiteral: "integer", NumericLiteral: "numeric", StringLiteral: "string",
	EscapeStringLiteral: "escape string", BitStringLiteral: "bit string",
	HexStringLiteral: "hex string", UnicodeStringLiteral: "unicode string",
	DollarStringLiteral: "dollar-quoted string",
}

func (c LiteralClass) String() string { return name(classNames[:], int(c)) }

type tokKind uint8

const (
	tokGap   tokKind = iota + 1 // whitespace and comments
	tokLit                      // a literal
	tokWord                     // identifier or keyword, plain or quoted
	tokParam                    // $n
	tokChar                     // any other byte: operator or punctuation
)

type token struct {
	kind  tokKind
	class LiteralClass // tokLit
	// newline reports a gap with a line break: between two string
	// literals it makes Postgres concatenate them, so it is kept in the
	// shape.
	newline bool
	// odd reports a token whose boundaries the scanner does not model
	// (trailing junk after a number, an unterminated quote, ...).
	odd bool
	end int
}

// span is a literal token of the input.
type span struct {
	start, end int
	class      LiteralClass
}

// scan is the scanner's result for one input; scans are pooled.
type scan struct {
	shape []byte // the normalized text
	lits  []span // literal tokens in order
	semis []int  // offsets of ';' tokens
	odd   bool   // some token is not modelled: cache by exact text only
	key   []byte // scratch for cache keys
}

// Placeholders are a zero byte followed by the literal's class: Postgres
// refuses zero bytes in query text (and so does Plan), so a placeholder
// never meets a real byte of the input.
const placeholder = 0

// run scans sql into sc: the shape keeps identifiers, quoted identifiers,
// operators and parameters verbatim, replaces each literal with a
// placeholder, drops comments and turns each run of whitespace and
// comments into one space. The run is a newline instead where Postgres
// would concatenate two string literals (a quoted literal, whitespace with
// a line break, a standard string).
//
// This is on every statement's path, so words, whitespace and punctuation
// are scanned inline; nextToken takes everything else.
func (sc *scan) run(sql string) {
	shape, lits, semis, odd := sc.shape[:0], sc.lits[:0], sc.semis[:0], false
	gap, newline, quoted := false, false, false
	for i := 0; i < len(sql); {
		c := sql[i]
		cls := charClass[c]
		switch {
		case cls&cSpace != 0:
			for ; i < len(sql) && charClass[sql[i]]&cSpace != 0; i++ {
				newline = newline || sql[i] == '\n' || sql[i] == '\r'
			}
			gap = true
			continue
		case cls&cWordStart != 0:
			j := i + 1
			for j < len(sql) && charClass[sql[j]]&cWord != 0 {
				j++
			}
			if j-i == 1 && j < len(sql) && (sql[j] == '\'' || sql[j] == '&') {
				break // maybe E'..', B'..', X'..', U&'..'
			}
			if gap && len(shape) > 0 {
				shape = append(shape, ' ')
			}
			shape = append(shape, sql[i:j]...)
			gap, newline, quoted, i = false, false, false, j
			continue
		case cls&cPunct != 0:
			if gap && len(shape) > 0 {
				shape = append(shape, ' ')
			}
			if c == ';' {
				semis = append(semis, i)
			}
			shape = append(shape, c)
			gap, newline, quoted, i = false, false, false, i+1
			continue
		}
		t := nextToken(sql, i)
		odd = odd || t.odd
		if t.kind == tokGap {
			gap, newline, i = true, newline || t.newline, t.end
			continue
		}
		if gap && len(shape) > 0 {
			if newline && quoted && t.kind == tokLit && t.class == StringLiteral {
				shape = append(shape, '\n')
			} else {
				shape = append(shape, ' ')
			}
		}
		if t.kind == tokLit {
			shape = append(shape, placeholder, byte(t.class))
			lits = append(lits, span{i, t.end, t.class})
		} else {
			shape = append(shape, sql[i:t.end]...)
		}
		quoted = t.kind == tokLit && t.class != IntegerLiteral && t.class != NumericLiteral && t.class != DollarStringLiteral
		gap, newline, i = false, false, t.end
	}
	sc.shape, sc.lits, sc.semis, sc.odd = shape, lits, semis, odd
}

// Byte classes for the scanner's fast paths.
const (
	cSpace     = 1 << iota // Postgres's whitespace
	cWord                  // continues an identifier
	cWordStart             // starts an identifier
	cPunct                 // a one-byte token that never begins a longer one
)

var charClass = func() (t [256]uint8) {
	for c := range t {
		switch b := byte(c); {
		case isSpace(b):
			t[c] = cSpace
		case isIdentStart(b):
			t[c] = cWord | cWordStart
		case isIdentCont(b):
			t[c] = cWord
		}
	}
	// Not ' " $ . - / or digits, which begin literals, quoted
	// identifiers, parameters and comments.
	for _, b := range []byte("()[]{},;:+*<>=~!@#%^&|`?\\") {
		t[b] = cPunct
	}
	return t
}()

// nextToken returns the token starting at s[i].
func nextToken(s string, i int) token {
	c := s[i]
	switch {
	case isSpace(c) || startsComment(s, i):
		return scanGap(s, i)
	case c == '\'':
		return scanString(s, i+1, StringLiteral)
	case c == '"':
		return scanQuotedIdent(s, i+1)
	case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
		return scanNumber(s, i)
	case c == '$':
		return scanDollar(s, i)
	case isIdentStart(c):
		return scanWord(s, i)
	}
	return token{kind: tokChar, end: i + 1}
}

func scanGap(s string, i int) token {
	t := token{kind: tokGap}
	for i < len(s) {
		switch c := s[i]; {
		case isSpace(c):
			t.newline = t.newline || c == '\n' || c == '\r'
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			// A -- comment ends at the line break, which the next
			// iteration counts.
			j := strings.IndexAny(s[i:], "\n\r")
			if j < 0 {
				t.end = len(s)
				return t
			}
			i += j
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			i = skipBlockComment(s, i, &t)
		default:
			t.end = i
			return t
		}
	}
	t.end = i
	return t
}

// skipBlockComment skips a /* */ comment, which nests in Postgres.
func skipBlockComment(s string, i int, t *token) int {
	depth := 0
	for i < len(s) {
		switch {
		case s[i] == '/' && i+1 < len(s) && s[i+1] == '*':
			depth++
			i += 2
		case s[i] == '*' && i+1 < len(s) && s[i+1] == '/':
			depth--
			i += 2
			if depth == 0 {
				return i
			}
		default:
			i++
		}
	}
	t.odd = true // unterminated: Postgres refuses it
	return i
}

// scanString scans a quoted literal whose opening quote ends at i. A
// doubled quote stands for one quote inside standard, escape and Unicode
// strings; escape strings also take a backslash escape. Bit and hex strings
// end at the first quote, as in Postgres's xb and xh states.
func scanString(s string, i int, class LiteralClass) token {
	for i < len(s) {
		switch s[i] {
		case '\\':
			if class == EscapeStringLiteral {
				i++
			}
		case '\'':
			if i+1 < len(s) && s[i+1] == '\'' && class != BitStringLiteral && class != HexStringLiteral {
				i++
				break
			}
			return token{kind: tokLit, class: class, end: i + 1}
		}
		i++
	}
	return token{kind: tokLit, class: class, end: len(s), odd: true}
}

func scanQuotedIdent(s string, i int) token {
	for i < len(s) {
		if s[i] == '"' {
			if i+1 < len(s) && s[i+1] == '"' {
				i += 2
				continue
			}
			return token{kind: tokWord, end: i + 1}
		}
		i++
	}
	return token{kind: tokWord, end: len(s), odd: true}
}

// scanNumber scans a decimal number: digits, an optional fraction and an
// optional exponent. Postgres 16 also takes 0x2A, 0o52, 0b101 and 1_000, and
// refuses junk such as 1abc; whatever follows a number directly and could
// extend it (a letter, a digit, '_', '.' or '$') makes the input odd, which
// keeps the scanner's boundaries exactly Postgres's on every input it
// calls regular.
func scanNumber(s string, i int) token {
	t := token{kind: tokLit, class: IntegerLiteral}
	i = skipDigits(s, i)
	if i < len(s) && s[i] == '.' {
		if i+1 < len(s) && s[i+1] == '.' {
			// Postgres reads 1..2 as 1 followed by .. (for PL/pgSQL
			// ranges); not worth modelling.
			t.odd = true
		}
		t.class = NumericLiteral
		i = skipDigits(s, i+1)
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j < len(s) && isDigit(s[j]) {
			t.class = NumericLiteral
			i = skipDigits(s, j)
		}
	}
	if i < len(s) && (isIdentCont(s[i]) || s[i] == '.') {
		t.odd = true
	}
	t.end = i
	return t
}

// scanDollar scans a parameter ($1) or a dollar-quoted string ($$...$$,
// $tag$...$tag$).
func scanDollar(s string, i int) token {
	if i+1 < len(s) && isDigit(s[i+1]) {
		j := skipDigits(s, i+1)
		return token{kind: tokParam, end: j, odd: j < len(s) && isIdentCont(s[j])}
	}
	j := i + 1
	if j < len(s) && isIdentStart(s[j]) {
		for j < len(s) && isIdentCont(s[j]) && s[j] != '$' {
			j++
		}
	}
	if j >= len(s) || s[j] != '$' {
		// A lone $ or $tag without its closing $: Postgres returns
		// the $ alone, and then fails.
		return token{kind: tokChar, end: i + 1, odd: true}
	}
	delim := s[i : j+1]
	k := strings.Index(s[j+1:], delim)
	if k < 0 {
		return token{kind: tokLit, class: DollarStringLiteral, end: len(s), odd: true}
	}
	return token{kind: tokLit, class: DollarStringLiteral, end: j + 1 + k + len(delim)}
}

// scanWord scans an identifier or keyword, or a literal with a letter
// prefix: E'..', B'..', X'..' and U&'..'. (N'..' is the keyword NCHAR
// followed by a standard string in Postgres too.)
func scanWord(s string, i int) token {
	j := i + 1
	for j < len(s) && isIdentCont(s[j]) {
		j++
	}
	if j-i == 1 && j < len(s) {
		switch c := s[i] | 0x20; {
		case s[j] == '\'' && c == 'e':
			return scanString(s, j+1, EscapeStringLiteral)
		case s[j] == '\'' && c == 'b':
			return scanString(s, j+1, BitStringLiteral)
		case s[j] == '\'' && c == 'x':
			return scanString(s, j+1, HexStringLiteral)
		case c == 'u' && s[j] == '&' && j+1 < len(s) && s[j+1] == '\'':
			return scanString(s, j+2, UnicodeStringLiteral)
		}
	}
	return token{kind: tokWord, end: j}
}

func startsComment(s string, i int) bool {
	return i+1 < len(s) && (s[i] == '-' && s[i+1] == '-' || s[i] == '/' && s[i+1] == '*')
}

func skipDigits(s string, i int) int {
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}

// isSpace is Postgres's lexer whitespace.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

func isIdentCont(c byte) bool { return isIdentStart(c) || isDigit(c) || c == '$' }

// Package redact hides secrets in job payloads before they are shown: in
// command output, service results meant for display, and logs.
package redact

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Mask replaces a hidden value.
const Mask = "[redacted]"

// DefaultFragments are the log.redact defaults.
var DefaultFragments = []string{"password", "secret", "token", "authorization", "api_key"}

// Redactor hides the values of JSON object fields whose names contain one
// of its fragments (case-insensitive), at any depth.
type Redactor struct {
	fragments []string
}

// New returns a Redactor for fragments (empty ones are ignored).
func New(fragments []string) *Redactor {
	r := &Redactor{}
	for _, f := range fragments {
		if f = strings.ToLower(strings.TrimSpace(f)); f != "" {
			r.fragments = append(r.fragments, f)
		}
	}
	return r
}

// Hides reports whether a field named name is hidden.
func (r *Redactor) Hides(name string) bool {
	name = strings.ToLower(name)
	for _, f := range r.fragments {
		if strings.Contains(name, f) {
			return true
		}
	}
	return false
}

// JSON returns payload with hidden fields masked. A payload that is not
// valid JSON is masked whole: it cannot be inspected, so nothing of it is
// shown.
func (r *Redactor) JSON(payload []byte) json.RawMessage {
	if len(bytes.TrimSpace(payload)) == 0 {
		return json.RawMessage(`null`)
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		b, _ := json.Marshal(Mask)
		return b
	}
	out, err := json.Marshal(r.value(v))
	if err != nil {
		b, _ := json.Marshal(Mask)
		return b
	}
	return out
}

func (r *Redactor) value(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if r.Hides(k) {
				t[k] = Mask
			} else {
				t[k] = r.value(x)
			}
		}
		return t
	case []any:
		for i, x := range t {
			t[i] = r.value(x)
		}
		return t
	default:
		return v
	}
}

// Text masks, in free text such as an error message, the value after any
// `name=` or `"name":` whose name is hidden: a best effort for text that is
// not JSON.
func (r *Redactor) Text(s string) string {
	if len(r.fragments) == 0 || s == "" {
		return s
	}
	lower := lowerSameOffsets(s)
	var b strings.Builder
	i := 0
	for i < len(s) {
		j, frag := r.nextFragment(lower, i)
		if j < 0 {
			break
		}
		// Extend to the end of the field name.
		end := j + len(frag)
		for end < len(s) && isNameByte(s[end]) {
			end++
		}
		k := end
		if k < len(s) && s[k] == '"' {
			k++
		}
		for k < len(s) && s[k] == ' ' {
			k++
		}
		if k < len(s) && (s[k] == '=' || s[k] == ':') {
			k++
			for k < len(s) && s[k] == ' ' {
				k++
			}
			b.WriteString(s[i:k])
			b.WriteString(Mask)
			start := k
			k = skipValue(s, k)
			if scheme := strings.ToLower(s[start:k]); (scheme == "bearer" || scheme == "basic") && k < len(s) && s[k] == ' ' {
				k = skipValue(s, k+1) // the credential after an auth scheme
			}
			i = k
			continue
		}
		b.WriteString(s[i:end])
		i = end
	}
	b.WriteString(s[i:])
	return b.String()
}

// lowerSameOffsets lower-cases s like strings.ToLower, except that a rune
// whose lower case is encoded in another number of bytes, and every byte of
// invalid UTF-8, is kept as it is: an offset in the result is the same
// offset in s.
func lowerSameOffsets(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c, n := utf8.DecodeRuneInString(s[i:])
		if l := unicode.ToLower(c); l != c && utf8.RuneLen(l) == n {
			b.WriteRune(l)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func (r *Redactor) nextFragment(lower string, from int) (int, string) {
	best, bestFrag := -1, ""
	for _, f := range r.fragments {
		if j := strings.Index(lower[from:], f); j >= 0 && (best < 0 || from+j < best) {
			best, bestFrag = from+j, f
		}
	}
	return best, bestFrag
}

func isNameByte(c byte) bool {
	return c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// skipValue returns the index after the value starting at k: a quoted
// string, a JSON object or array (to its matching bracket, or the end of
// s), or a run up to a separator.
func skipValue(s string, k int) int {
	if k < len(s) && (s[k] == '{' || s[k] == '[') {
		depth := 0
		for ; k < len(s); k++ {
			switch s[k] {
			case '"':
				k = skipValue(s, k) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return k + 1
				}
			}
		}
		return k
	}
	if k < len(s) && s[k] == '"' {
		for k++; k < len(s); k++ {
			if s[k] == '\\' {
				k++
				continue
			}
			if s[k] == '"' {
				return k + 1
			}
		}
		return len(s) // unterminated; a final backslash must not step past the end
	}
	for k < len(s) && s[k] != ' ' && s[k] != ',' && s[k] != '}' && s[k] != '&' && s[k] != ';' {
		k++
	}
	return k
}

// Tags returns tags with the value of every "name:value" tag whose name
// the redactor hides replaced by [redacted], as JSON fields are; other
// tags are returned as they are. The slice is a copy when anything
// changed.
func (r *Redactor) Tags(tags []string) []string {
	var out []string
	for i, t := range tags {
		name, _, ok := strings.Cut(t, ":")
		if !ok || !r.Hides(name) {
			continue
		}
		if out == nil {
			out = slices.Clone(tags)
		}
		out[i] = name + ":" + Mask
	}
	if out == nil {
		return tags
	}
	return out
}

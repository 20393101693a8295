package config

import (
	"net/url"
	"strings"
)

const (
	// mask replaces a password; it matches net/url's URL.Redacted.
	mask = "xxxxx"
	// unparseableURL is what RedactURL returns for input it cannot parse:
	// echoing it could show a password.
	unparseableURL = "[unparseable database url]"
)

// RedactURL returns a PostgreSQL connection string with every password
// replaced by "xxxxx", for logs and error messages. It accepts both forms
// PostgreSQL understands:
//
//	postgres://u:secret@h/db?sslpassword=s   -> postgres://u:xxxxx@h/db?sslpassword=xxxxx
//	password=secret host=h                   -> password=xxxxx host=h
//
// Any URL query parameter or keyword whose name contains "password" is
// masked. The empty string is returned unchanged. Input that is neither a
// parseable URL nor a well-formed keyword/value string yields
// "[unparseable database url]" rather than an echo of the input. RedactURL
// never panics.
func RedactURL(s string) string {
	out, _, ok := redact(s)
	if !ok {
		return unparseableURL
	}
	return out
}

// redact masks the passwords in s. It also returns the passwords it found
// (both as written and decoded) so callers can scrub them elsewhere, and
// whether s could be parsed at all.
func redact(s string) (out string, secrets []string, ok bool) {
	switch {
	case s == "":
		return "", nil, true
	case hasScheme(s):
		return redactURLForm(s)
	case strings.Contains(s, "="):
		return redactKeywordValue(s)
	default:
		return "", nil, false
	}
}

// hasScheme reports whether s starts with "scheme://".
func hasScheme(s string) bool {
	i := strings.Index(s, "://")
	if i <= 0 {
		return false
	}
	for j := 0; j < i; j++ {
		c := s[j]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case j > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// isPasswordKey reports whether a URL parameter or DSN keyword holds a
// password ("password", "sslpassword", ...).
func isPasswordKey(k string) bool {
	return strings.Contains(strings.ToLower(k), "password")
}

func redactURLForm(s string) (string, []string, bool) {
	u, err := url.Parse(s)
	if err != nil {
		// Still report what looks like the password, to scrub it elsewhere.
		return "", []string{rawURLPassword(s)}, false
	}
	var secrets []string
	if u.User != nil {
		if pw, has := u.User.Password(); has {
			secrets = append(secrets, pw, rawURLPassword(s))
			u.User = url.UserPassword(u.User.Username(), mask)
		}
	}
	if u.RawQuery != "" {
		var found []string
		u.RawQuery, found = redactQuery(u.RawQuery)
		secrets = append(secrets, found...)
	}
	return u.String(), secrets, true
}

// rawURLPassword returns the password of a "scheme://user:pass@host" string
// as written (still percent-encoded), or "".
func rawURLPassword(s string) string {
	_, rest, _ := strings.Cut(s, "://")
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	_, pw, _ := strings.Cut(rest[:at], ":")
	return pw
}

// redactQuery masks the values of password parameters in a raw query,
// keeping everything else byte for byte. Both '&' and ';' separate
// parameters, so that no separator hides a password.
func redactQuery(q string) (string, []string) {
	var b strings.Builder
	var secrets []string
	for q != "" {
		param := q
		sep := ""
		if i := strings.IndexAny(q, "&;"); i >= 0 {
			param, sep, q = q[:i], q[i:i+1], q[i+1:]
		} else {
			q = ""
		}
		k, v, hasValue := strings.Cut(param, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		if hasValue && v != "" && isPasswordKey(name) {
			secrets = append(secrets, v)
			if dv, err := url.QueryUnescape(v); err == nil {
				secrets = append(secrets, dv)
			}
			param = k + "=" + mask
		}
		b.WriteString(param)
		b.WriteString(sep)
	}
	return b.String(), secrets
}

// redactKeywordValue masks password values in a libpq keyword/value string
// ("host=h password='a b'"), keeping everything else byte for byte.
func redactKeywordValue(s string) (string, []string, bool) {
	var b strings.Builder
	var secrets []string
	last, i := 0, 0
	for {
		i = skipDSNSpace(s, i)
		if i == len(s) {
			break
		}
		keyStart := i
		for i < len(s) && s[i] != '=' && !isDSNSpace(s[i]) {
			i++
		}
		key := s[keyStart:i]
		i = skipDSNSpace(s, i)
		if key == "" || i == len(s) || s[i] != '=' {
			return "", nil, false
		}
		valStart := skipDSNSpace(s, i+1)
		end, value, ok := scanDSNValue(s, valStart)
		if !ok {
			return "", nil, false
		}
		if isPasswordKey(key) && end > valStart {
			b.WriteString(s[last:valStart])
			if s[valStart] == '\'' {
				b.WriteString("'" + mask + "'") // keep the structure: 'a'b=c
			} else {
				b.WriteString(mask)
			}
			last = end
			secrets = append(secrets, value, s[valStart:end])
		}
		i = end
	}
	b.WriteString(s[last:])
	return b.String(), secrets, true
}

// scanDSNValue reads the value starting at s[i]: either a single-quoted
// string or a run of non-space bytes, with backslash escapes in both. It
// returns the index just past the value and the unescaped value.
func scanDSNValue(s string, i int) (end int, value string, ok bool) {
	quoted := i < len(s) && s[i] == '\''
	if quoted {
		i++
	}
	var v strings.Builder
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i == len(s) {
				return 0, "", false
			}
			v.WriteByte(s[i])
		case quoted && c == '\'':
			return i + 1, v.String(), true
		case !quoted && isDSNSpace(c):
			return i, v.String(), true
		default:
			v.WriteByte(c)
		}
	}
	if quoted {
		return 0, "", false
	}
	return i, v.String(), true
}

func skipDSNSpace(s string, i int) int {
	for i < len(s) && isDSNSpace(s[i]) {
		i++
	}
	return i
}

func isDSNSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
}

package fleet

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleet-go/fleet/model"
	"github.com/fleet-go/fleet/store"
)

// Ability is what a dashboard token lets its bearer do.
type Ability string

// Abilities.
const (
	// AbilityView reads: every GET of the dashboard's API.
	AbilityView Ability = "view"
	// AbilityOperate changes: retry and forget failed jobs, pause and
	// continue. A token with operate can view too.
	AbilityOperate Ability = "operate"
)

// ParseAbilities reads a comma-separated list such as "view,operate".
// Each ability may also be named with the prefix "fleet." ("fleet.view",
// "fleet.operate"), as the dashboard's documentation names them. Operate
// implies view, so the result always holds view; it is sorted and without
// repeats.
func ParseAbilities(s string) ([]Ability, error) {
	out := []Ability{AbilityView}
	for part := range strings.SplitSeq(s, ",") {
		switch a := Ability(strings.TrimPrefix(strings.TrimSpace(part), "fleet.")); a {
		case AbilityView:
		case AbilityOperate:
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		default:
			return nil, fmt.Errorf("unknown ability %q (abilities: view, operate, or fleet.view, fleet.operate)", part)
		}
	}
	return out, nil
}

// TokenParams describe a new dashboard token.
type TokenParams struct {
	// Name identifies the token in listings and for revoking: 1 to 100
	// letters, digits, '.', '_', '-', ':' or '@'.
	Name string
	// Abilities it grants; operate implies view. Empty: view.
	Abilities []Ability
	// ExpiresIn is how long it is valid (0: until revoked).
	ExpiresIn time.Duration
}

// Token is a dashboard token as listings show it: never its secret.
type Token struct {
	Name       string     `json:"name"`
	Abilities  []Ability  `json:"abilities"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	// State is active, expired or revoked, judged on the database clock.
	State string `json:"state"`
}

// Can reports whether the token grants a.
func (t Token) Can(a Ability) bool { return slices.Contains(t.Abilities, a) }

// Token states.
const (
	TokenActive  = "active"
	TokenExpired = "expired"
	TokenRevoked = "revoked"
)

// ErrTokenInvalid is returned (wrapped, with the reason) by Authenticate
// for a token that is malformed, unknown, revoked or expired.
var ErrTokenInvalid = errors.New("invalid token")

// ErrTokenNotFound is returned (wrapped) by RevokeToken when no token of
// that name is left to revoke.
var ErrTokenNotFound = model.ErrTokenNotFound

// ErrTokenNameTaken is returned (wrapped) by CreateToken when a valid
// token has the name.
var ErrTokenNameTaken = errors.New("a valid token has this name")

// tokenPrefix starts every token, so that one found in a file or a log is
// recognisable.
const tokenPrefix = "fleet_"

// tokenTouchEvery is how often a token's last use is written at most.
const tokenTouchEvery = time.Minute

// CheckTokenName applies the rules of TokenParams.Name; label names the
// argument in the error.
func CheckTokenName(label, name string) error {
	if name == "" || len(name) > 100 {
		return fmt.Errorf("%s must be 1 to 100 characters, got %d", label, len(name))
	}
	for _, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune("._-:@", c)) {
			return fmt.Errorf("%s may hold only letters, digits and . _ - : @, got %q", label, name)
		}
	}
	return nil
}

// CreateToken stores a new token and returns it with its secret, the only
// time the secret exists outside the bearer's hands: the database keeps its
// SHA-256 only. A revoked or expired token of the same name is replaced.
func (s *Service) CreateToken(ctx context.Context, p TokenParams) (string, Token, error) {
	if err := CheckTokenName("the token's name", p.Name); err != nil {
		return "", Token{}, err
	}
	if p.ExpiresIn < 0 {
		return "", Token{}, fmt.Errorf("a token's lifetime must not be negative, got %s", p.ExpiresIn)
	}
	abilities := []Ability{AbilityView}
	for _, a := range p.Abilities {
		if a != AbilityView && a != AbilityOperate {
			return "", Token{}, fmt.Errorf("unknown ability %q (abilities: view, operate)", a)
		}
		if !slices.Contains(abilities, a) {
			abilities = append(abilities, a)
		}
	}
	id := make([]byte, 8)
	secret := make([]byte, 32)
	_, _ = rand.Read(id) // crypto/rand.Read never fails
	_, _ = rand.Read(secret)
	encoded := base64.RawURLEncoding.EncodeToString(secret)
	hash := sha256.Sum256([]byte(encoded))
	row, err := s.st.TokenInsert(ctx, store.TokenInsertParams{
		ID: hex.EncodeToString(id), Name: p.Name, SecretHash: hash[:],
		Abilities: convert(abilities, func(a Ability) string { return string(a) }), ExpiresIn: p.ExpiresIn,
	})
	if errors.Is(err, store.ErrTokenNameTaken) {
		return "", Token{}, fmt.Errorf("%w: %q (revoke it first, or choose another name)", ErrTokenNameTaken, p.Name)
	}
	if err != nil {
		return "", Token{}, err
	}
	return tokenPrefix + row.ID + "_" + encoded, tokenOf(row, row.CreatedAt), nil
}

// Tokens lists every token by name, revoked and expired ones included.
func (s *Service) Tokens(ctx context.Context) ([]Token, error) {
	rows, now, err := s.st.TokenList(ctx)
	if err != nil {
		return nil, err
	}
	return convert(rows, func(r store.Token) Token { return tokenOf(r, now) }), nil
}

// RevokeToken revokes the token named name: from now on it is refused.
func (s *Service) RevokeToken(ctx context.Context, name string) (Token, error) {
	row, err := s.st.TokenRevoke(ctx, name)
	if errors.Is(err, store.ErrTokenNotFound) {
		return Token{}, fmt.Errorf("%w: no token named %q that is not revoked already", ErrTokenNotFound, name)
	}
	if err != nil {
		return Token{}, err
	}
	return tokenOf(row, *row.RevokedAt), nil
}

// Authenticate checks a token and returns what it grants. A malformed,
// unknown, revoked or expired token is an error wrapping ErrTokenInvalid
// that says which (never repeating the token). The secret is compared in
// constant time; the token's last use is written at most once a minute.
func (s *Service) Authenticate(ctx context.Context, token string) (Token, error) {
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	id, secret, ok2 := strings.Cut(rest, "_")
	if !ok || !ok2 || len(id) != 16 || secret == "" {
		return Token{}, fmt.Errorf("%w: not a fleet token (fleet_ID_SECRET)", ErrTokenInvalid)
	}
	if _, err := hex.DecodeString(id); err != nil {
		return Token{}, fmt.Errorf("%w: not a fleet token (fleet_ID_SECRET)", ErrTokenInvalid)
	}
	row, now, err := s.st.TokenGet(ctx, id)
	if errors.Is(err, store.ErrTokenNotFound) {
		return Token{}, fmt.Errorf("%w: unknown token", ErrTokenInvalid)
	}
	if err != nil {
		return Token{}, err
	}
	hash := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(hash[:], row.SecretHash) != 1 {
		return Token{}, fmt.Errorf("%w: unknown token", ErrTokenInvalid)
	}
	t := tokenOf(row, now)
	switch t.State {
	case TokenRevoked:
		return Token{}, fmt.Errorf("%w: the token %q was revoked", ErrTokenInvalid, t.Name)
	case TokenExpired:
		return Token{}, fmt.Errorf("%w: the token %q expired at %s", ErrTokenInvalid, t.Name, t.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if row.LastUsedAt == nil || now.Sub(*row.LastUsedAt) >= tokenTouchEvery {
		// A use that cannot be recorded (a read-only database after a
		// failover, say) must not lock operators out: the error is dropped.
		if _, err := s.st.TokenTouch(ctx, row.ID, tokenTouchEvery); err == nil {
			t.LastUsedAt = &now
		}
	}
	return t, nil
}

// tokenOf turns a row into a Token, its state judged at now.
func tokenOf(r store.Token, now time.Time) Token {
	t := Token{
		Name: r.Name, Abilities: convert(r.Abilities, func(a string) Ability { return Ability(a) }),
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, LastUsedAt: r.LastUsedAt, RevokedAt: r.RevokedAt,
		State: TokenActive,
	}
	switch {
	case r.RevokedAt != nil:
		t.State = TokenRevoked
	case r.ExpiresAt != nil && !now.Before(*r.ExpiresAt):
		t.State = TokenExpired
	}
	return t
}

// convert maps each of rows through one.
func convert[T, S any](rows []S, one func(S) T) []T {
	out := make([]T, len(rows))
	for i, r := range rows {
		out[i] = one(r)
	}
	return out
}

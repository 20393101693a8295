package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/fleet-go/fleet"
)

// Authenticator decides what a request may do: the abilities it grants
// (view for reading, operate for changing). An error wrapping
// ErrUnauthenticated answers 401 with its message; any other error 500.
// No error and no view ability answers 403.
type Authenticator func(r *http.Request) ([]fleet.Ability, error)

// ErrUnauthenticated says a request carries no credentials the
// authenticator accepts.
var ErrUnauthenticated = errors.New("unauthenticated")

// BearerToken returns the token of an "Authorization: Bearer TOKEN"
// header, or an error wrapping ErrUnauthenticated.
func BearerToken(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", fmt.Errorf("%w: no token (send the header Authorization: Bearer TOKEN)", ErrUnauthenticated)
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", fmt.Errorf("%w: the Authorization header is not Bearer TOKEN", ErrUnauthenticated)
	}
	return strings.TrimSpace(token), nil
}

// TokenAuthenticator accepts the bearer tokens of fleet_tokens (made by
// `app fleet:token create`), granting their abilities. An unknown,
// revoked or expired token is refused saying which.
func TokenAuthenticator(svc *fleet.Service) Authenticator {
	return func(r *http.Request) ([]fleet.Ability, error) {
		token, err := BearerToken(r)
		if err != nil {
			return nil, err
		}
		t, err := svc.Authenticate(r.Context(), token)
		if errors.Is(err, fleet.ErrTokenInvalid) {
			return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
		}
		if err != nil {
			return nil, err
		}
		return t.Abilities, nil
	}
}

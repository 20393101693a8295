package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/model"
)

// ErrTokenNotFound is returned for a token id or name that no row has (or,
// for TokenRevoke, none that is not revoked already).
var ErrTokenNotFound = model.ErrTokenNotFound

// ErrTokenNameTaken is returned by TokenInsert when a token that is neither
// revoked nor expired has the name.
var ErrTokenNameTaken = errors.New("a token with this name exists")

// Token is a row of fleet_tokens. SecretHash is the SHA-256 of the secret
// part of the token; the token itself is never stored.
type Token struct {
	ID         string
	Name       string
	SecretHash []byte
	Abilities  []string
	CreatedAt  time.Time
	ExpiresAt  *time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

const tokenColumns = `id, name, secret_hash, abilities, created_at, expires_at, last_used_at, revoked_at`

// TokenInsertParams is a new token's row.
type TokenInsertParams struct {
	ID         string
	Name       string
	SecretHash []byte
	Abilities  []string
	// ExpiresIn is how long the token is valid from now, on the database
	// clock; 0: it never expires.
	ExpiresIn time.Duration
}

// TokenInsert stores a new token. A revoked or expired token of the same
// name is replaced; a valid one makes it fail with ErrTokenNameTaken.
func (s *Store) TokenInsert(ctx context.Context, p TokenInsertParams) (Token, error) {
	rows, err := s.pool.Query(ctx, `
		INSERT INTO fleet_tokens (id, name, secret_hash, abilities, expires_at)
		VALUES ($1, $2, $3, $4, CASE WHEN $5::bigint > 0 THEN now() + $5::bigint * interval '1 microsecond' END)
		ON CONFLICT (name) DO UPDATE SET
			id = EXCLUDED.id, secret_hash = EXCLUDED.secret_hash, abilities = EXCLUDED.abilities,
			created_at = now(), expires_at = EXCLUDED.expires_at, last_used_at = NULL, revoked_at = NULL
		WHERE fleet_tokens.revoked_at IS NOT NULL OR fleet_tokens.expires_at <= now()
		RETURNING `+tokenColumns,
		p.ID, p.Name, p.SecretHash, p.Abilities, p.ExpiresIn.Microseconds())
	if err != nil {
		return Token{}, fmt.Errorf("create token %q: %w", p.Name, err)
	}
	t, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Token])
	if err != nil {
		return Token{}, fmt.Errorf("create token %q: %w", p.Name, err)
	}
	if len(t) == 0 {
		return Token{}, fmt.Errorf("create token %q: %w", p.Name, ErrTokenNameTaken)
	}
	return t[0], nil
}

// TokenList returns every token sorted by name, and the database's now()
// to judge their expiry by.
func (s *Store) TokenList(ctx context.Context) ([]Token, time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, now, fmt.Errorf("list tokens: %w", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+tokenColumns+` FROM fleet_tokens ORDER BY name`)
	if err != nil {
		return nil, now, fmt.Errorf("list tokens: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Token])
	if err != nil {
		return nil, now, fmt.Errorf("list tokens: %w", err)
	}
	return out, now, nil
}

// TokenGet returns the token with id (ErrTokenNotFound when none has it)
// and the database's now(). It reads one row by primary key.
func (s *Store) TokenGet(ctx context.Context, id string) (Token, time.Time, error) {
	var t Token
	var now time.Time
	err := s.pool.QueryRow(ctx, `SELECT `+tokenColumns+`, now() FROM fleet_tokens WHERE id = $1`, id).Scan(
		&t.ID, &t.Name, &t.SecretHash, &t.Abilities, &t.CreatedAt, &t.ExpiresAt, &t.LastUsedAt, &t.RevokedAt, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return Token{}, time.Time{}, fmt.Errorf("token %s: %w", id, ErrTokenNotFound)
	}
	if err != nil {
		return Token{}, time.Time{}, fmt.Errorf("read token %s: %w", id, err)
	}
	return t, now, nil
}

// TokenTouch records that the token with id was used now, unless a use
// was recorded less than every ago (by the database clock), so that a busy
// token costs one write per interval, not one per request. It reports
// whether it wrote.
func (s *Store) TokenTouch(ctx context.Context, id string, every time.Duration) (bool, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE fleet_tokens SET last_used_at = now()
		WHERE id = $1 AND (last_used_at IS NULL OR last_used_at <= now() - $2::bigint * interval '1 microsecond')`,
		id, every.Microseconds())
	if err != nil {
		return false, fmt.Errorf("record the use of token %s: %w", id, err)
	}
	return tag.RowsAffected() > 0, nil
}

// TokenRevoke revokes the token named name at once (ErrTokenNotFound when
// no unrevoked token has the name).
func (s *Store) TokenRevoke(ctx context.Context, name string) (Token, error) {
	rows, err := s.pool.Query(ctx, `
		UPDATE fleet_tokens SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL
		RETURNING `+tokenColumns, name)
	if err != nil {
		return Token{}, fmt.Errorf("revoke token %q: %w", name, err)
	}
	t, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Token])
	if err != nil {
		return Token{}, fmt.Errorf("revoke token %q: %w", name, err)
	}
	if len(t) == 0 {
		return Token{}, fmt.Errorf("revoke token %q: %w", name, ErrTokenNotFound)
	}
	return t[0], nil
}

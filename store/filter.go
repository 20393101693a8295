package store

import (
	"fmt"
	"strings"
)

// filter builds a statement's WHERE clause from the filters that are set,
// each with a parameter of its own, so that every combination of filters is
// a statement text of its own. pgx prepares and caches statements, and
// PostgreSQL may plan a prepared statement once for every value (a generic
// plan). A catch-all condition such as
//
//	WHERE $1 = '' OR queue = $1
//
// then gets one plan for both meanings, which can use no index for queue
// and reads the whole table. A statement holding only the conditions it
// really has is planned for them, custom or generic. Conditions are fixed
// SQL written in this package, never user input; values only ever travel as
// parameters.
type filter struct {
	conds []string
	args  []any
}

// add adds cond, in which every "$?" stands for arg's parameter.
func (f *filter) add(cond string, arg any) {
	cond = strings.ReplaceAll(cond, "$?", f.param(arg))
	f.conds = append(f.conds, cond)
}

// param adds a parameter that is not a condition (a limit, an offset) and
// returns its placeholder.
func (f *filter) param(arg any) string {
	f.args = append(f.args, arg)
	return fmt.Sprintf("$%d", len(f.args))
}

// where is " WHERE " and the conditions joined by AND, or "" with none.
func (f *filter) where() string {
	if len(f.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(f.conds, " AND ")
}

// page appends LIMIT and OFFSET to a statement.
func (f *filter) page(limit, offset int) string {
	return " LIMIT " + f.param(limit) + " OFFSET " + f.param(offset)
}

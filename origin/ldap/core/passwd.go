package core

import "fmt"

// noReplay says why the identity in force cannot be re-established on
// another server (credOK false).
func (ss *session) noReplay() string {
	if ss.credWhy != "" {
		return ss.credWhy
	}
	return fmt.Sprintf("the SASL identity of %q cannot be re-established on another server", ss.user)
}

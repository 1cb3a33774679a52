package server

import (
	"context"
	"errors"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/server/wire"
)

// reasonError is a classified error with the wire reason the server
// detected it for.
type reasonError struct {
	reason string
	err    error
}

func (e *reasonError) Error() string { return e.err.Error() }
func (e *reasonError) Unwrap() error { return e.err }

// errorf returns an error of class c with the wire reason reason.
func errorf(c gym.ErrorClass, reason, format string, args ...any) error {
	return &reasonError{reason: reason, err: gym.Errorf(c, format, args...)}
}

// wireError maps any error to its wire form. It is the only place where
// errors become codes: the code is the error's gym class, the mask hint is
// gym.Masked of it, and the reason comes from the server's own checks.
func wireError(err error) *wire.Error {
	class := gym.ClassOf(err)
	var reason string
	var re *reasonError
	if errors.As(err, &re) {
		reason = re.reason
	}
	switch {
	case errors.Is(err, wire.ErrMalformed):
		class, reason = gym.ClassInvalidArgument, wire.ReasonBadFrame
	case errors.Is(err, wire.ErrBadRequest):
		class, reason = gym.ClassInvalidArgument, wire.ReasonBadRequest
	case class == gym.ClassInternal && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// Request contexts end only when the server stops or the
		// connection is gone: the request was not served.
		class = gym.ClassUnavailable
	}
	return &wire.Error{Code: string(class), Message: err.Error(), Mask: gym.Masked(class), Reason: reason}
}

package gym

import "fmt"

// ErrorClass names one of the closed set of error categories. Classes are
// stable strings: they appear on the wire, in trajectories and in metrics.
type ErrorClass string

// The error classes. The first five describe what went wrong in an episode;
// the rest describe a request that could not be served.
const (
	// ClassNone marks the absence of an error.
	ClassNone ErrorClass = ""
	// ClassAgent is a bad action: unknown tool, malformed arguments, a
	// command that failed because of what the agent asked for.
	ClassAgent ErrorClass = "agent_error"
	// ClassToolTimeout is a tool call that ran past its time limit.
	ClassToolTimeout ErrorClass = "tool_timeout"
	// ClassSandbox is an infrastructure failure of the sandbox: the container
	// died, the Docker daemon is gone, the executor stopped answering.
	ClassSandbox ErrorClass = "sandbox_error"
	// ClassVerifier is a failure to run or parse the tests themselves.
	ClassVerifier ErrorClass = "verifier_error"
	// ClassPolicy is a failure of the LLM policy (API errors, bad responses).
	ClassPolicy ErrorClass = "policy_error"
	// ClassInvalidArgument is a malformed request.
	ClassInvalidArgument ErrorClass = "invalid_argument"
	// ClassNotFound is an unknown environment, task, session or tool.
	ClassNotFound ErrorClass = "not_found"
	// ClassEpisodeDone is a step on a session whose episode has ended.
	ClassEpisodeDone ErrorClass = "episode_done"
	// ClassResourceExhausted is a breached limit (sessions, frame size, ...).
	ClassResourceExhausted ErrorClass = "resource_exhausted"
	// ClassUnavailable is a server that is draining or not ready.
	ClassUnavailable ErrorClass = "unavailable"
	// ClassUnauthenticated is a missing or wrong credential.
	ClassUnauthenticated ErrorClass = "unauthenticated"
	// ClassInternal is a bug: anything not classified otherwise.
	ClassInternal ErrorClass = "internal"
)

// Sentinel errors, one per class. Wrap them with %w to classify an error:
//
//	gym.Classify(fmt.Errorf("session %s: start container: %w", id, err), gym.ClassSandbox)
//	fmt.Errorf("session %s: %w", id, gym.ErrNotFound)
var (
	ErrAgent             = &classError{ClassAgent}
	ErrToolTimeout       = &classError{ClassToolTimeout}
	ErrSandbox           = &classError{ClassSandbox}
	ErrVerifier          = &classError{ClassVerifier}
	ErrPolicy            = &classError{ClassPolicy}
	ErrInvalidArgument   = &classError{ClassInvalidArgument}
	ErrNotFound          = &classError{ClassNotFound}
	ErrEpisodeDone       = &classError{ClassEpisodeDone}
	ErrResourceExhausted = &classError{ClassResourceExhausted}
	ErrUnavailable       = &classError{ClassUnavailable}
	ErrUnauthenticated   = &classError{ClassUnauthenticated}
	ErrInternal          = &classError{ClassInternal}
)

// classError is the type of the sentinels; its message is the class name.
type classError struct{ class ErrorClass }

func (e *classError) Error() string { return string(e.class) }

// sentinels lists every sentinel.
var sentinels = []*classError{
	ErrAgent, ErrToolTimeout, ErrSandbox, ErrVerifier, ErrPolicy,
	ErrInvalidArgument, ErrNotFound, ErrEpisodeDone, ErrResourceExhausted,
	ErrUnavailable, ErrUnauthenticated, ErrInternal,
}

// ClassOf returns the class of err: the outermost class sentinel in err's
// chain (depth first, in wrapping order), ClassInternal for an unclassified
// error and ClassNone for nil. Outermost wins so that a layer can reclassify
// an error it wraps.
func ClassOf(err error) ErrorClass {
	if err == nil {
		return ClassNone
	}
	if c, ok := findClass(err); ok {
		return c
	}
	return ClassInternal
}

func findClass(err error) (ErrorClass, bool) {
	for err != nil {
		if ce, ok := err.(*classError); ok {
			return ce.class, true
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if c, ok := findClass(e); ok {
					return c, true
				}
			}
			return ClassNone, false
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return ClassNone, false
		}
	}
	return ClassNone, false
}

// Classes returns every error class except ClassNone, in a fixed order.
func Classes() []ErrorClass {
	out := make([]ErrorClass, len(sentinels))
	for i, s := range sentinels {
		out[i] = s.class
	}
	return out
}

// Sentinel returns the sentinel error of class c, or ErrInternal for an
// unknown class. Clients use it to rebuild classified errors from the wire.
func Sentinel(c ErrorClass) error {
	for _, s := range sentinels {
		if s.class == c {
			return s
		}
	}
	return ErrInternal
}

// Masked reports whether a sample that failed with class c should be dropped
// by a trainer rather than scored: true for infrastructure failures, which
// say nothing about the agent.
func Masked(c ErrorClass) bool {
	switch c {
	case ClassSandbox, ClassVerifier, ClassPolicy, ClassUnavailable, ClassInternal:
		return true
	}
	return false
}

// Errorf formats an error that wraps the sentinel of class c.
// The message reads as the formatted text alone.
func Errorf(c ErrorClass, format string, args ...any) error {
	return &classified{msg: fmt.Sprintf(format, args...), class: Sentinel(c)}
}

// Classify wraps err so that ClassOf reports c, keeping err's message and chain.
func Classify(err error, c ErrorClass) error {
	if err == nil {
		return nil
	}
	return &classified{msg: err.Error(), cause: err, class: Sentinel(c)}
}

// classified carries a message, an optional cause and a class sentinel.
type classified struct {
	msg   string
	cause error
	class error
}

func (e *classified) Error() string { return e.msg }

func (e *classified) Unwrap() []error {
	if e.cause == nil {
		return []error{e.class}
	}
	return []error{e.class, e.cause}
}

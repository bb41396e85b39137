package emulator

import "fmt"

// The comment match module.

// CommentMatch is -m comment --comment TEXT.
type CommentMatch struct{ Comment string }

// Module implements Match.
func (*CommentMatch) Module() string { return "comment" }

func (m *CommentMatch) option(rc *ruleCtx, opt string, _ bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	if len(args[0].val) > 255 {
		return fmt.Errorf("comment longer than 255 characters")
	}
	m.Comment = args[0].val
	return nil
}

func (m *CommentMatch) finish(*ruleCtx) error { return nil }

func (m *CommentMatch) appendArgs(b []byte) []byte {
	b = append(b, " --comment "...)
	return saveString(b, m.Comment)
}

func (*CommentMatch) eval(*evalCtx) tri { return yes }

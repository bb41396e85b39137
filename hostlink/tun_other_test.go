//go:build !linux

package hostlink

import "testing"

func benchTUN(b *testing.B) { b.Skip("a TUN device needs Linux") }

// Package alloc is part of clusterlab; see ../DESIGN notes in README.md.
// This package comment is replaced when the package lands.
package alloc

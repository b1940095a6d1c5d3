// Package layout holds no code: its test keeps the package layout of
// docs/design.md section 6 true, by the imports in its source files.
package layout

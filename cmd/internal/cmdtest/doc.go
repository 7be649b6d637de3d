// Package cmdtest holds what the tests of itlproxy's and itlbench's
// commands share.
package cmdtest

//go:build tools

// Package etcd pins the etcd server the harness runs.
package etcd

import _ "go.etcd.io/etcd/server/v3"

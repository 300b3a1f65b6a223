// Package sandboxhelper is the helper side of procexec's sandbox: what the
// workbench-sandbox binary (and any binary procexec re-executes as its helper) runs
// between its start by the parent and the program's exec, and nothing else. It is a
// package of its own so that the helper, started once per command, links and
// initialises only this (x/sys, Landlock, the refusal codes): the parent's cgroup
// manager (containerd cgroups, protobuf, cilium/ebpf, dbus) and seccomp policy builder
// (moby profiles, go-seccomp-bpf) stay in procexec. procexec builds the configuration
// (Config) and the seccomp program; this package only applies them.
package sandboxhelper

// Package queue holds what the hub's controllers use to hand each other
// work in memory: a controller's queue once it started (Ref), the priorities
// of status and change requests, the multicluster request of a Database in a
// member, and the limiter that keeps slow members from taking every member
// sync worker.
package queue

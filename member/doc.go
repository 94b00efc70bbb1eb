// Package member holds what a hub Database becomes in one member cluster:
//
//   - Render (pure) turns a Database into the member's typed objects;
//   - Apply writes them with server-side apply under fleetdb's field manager,
//     refuses to touch objects fleetdb does not own, prunes what is no longer
//     rendered and, through a Memo, sends nothing at all when the member
//     already holds what was last applied;
//   - Observe folds the member's StatefulSet and Service into the per-cluster
//     status the hub aggregates;
//   - Teardown removes (or releases) the member objects by label according to
//     the Database's deletion policy.
//
// Member objects are found by their labels (see Labels and SelectorFor), never
// by an inventory kept elsewhere, so a restarted hub finds what it created.
package member

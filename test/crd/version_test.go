package crd

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestVersionAndStorageChanges: the API server refuses, on update, the
// version and storage changes that cannot work in the members (a major
// downgrade, a postgres major upgrade to before 16, a major change of a
// PrimaryStandby Database or of postgres on the StatefulSet backend, a
// mysql series downgrade, a smaller storage size) with a message that says
// what to do, and accepts the changes that work.
func TestVersionAndStorageChanges(t *testing.T) {
	f := fleet.Start(t, fleet.Options{Members: []string{}})
	hub := f.Hub.Client

	const primaryStandby = `topology: {mode: PrimaryStandby, primaryCluster: eu-1}`
	cases := []struct {
		name string
		// spec is the created Database's spec patch; change is applied to it as an update.
		spec, change string
		// want are substrings of the refusal; none: the update is accepted.
		want []string
	}{
		{name: "postgres major downgrade", spec: `{version: "17"}`, change: `{version: "16"}`,
			want: []string{"spec.version", "cannot go down", "restore a backup"}},
		{name: "postgres major downgrade from the default", spec: `{}`, change: `{version: "16.4"}`,
			want: []string{"spec.version", "cannot go down"}},
		{name: "postgres major downgrade, versions as numbers", spec: `{version: 17}`, change: `{version: 16}`,
			want: []string{"spec.version", "cannot go down"}},
		{name: "postgres major upgrade to before 16", spec: `{version: "14"}`, change: `{version: "15"}`,
			want: []string{"spec.version", "16 or later"}},
		{name: "postgres major upgrade of a PrimaryStandby Database", spec: `{version: "16", ` + primaryStandby + `}`, change: `{version: "17"}`,
			want: []string{"spec.version", "PrimaryStandby", "DatabaseBackup", "restoreFrom"}},
		{name: "postgres major upgrade on the StatefulSet backend", spec: `{version: "16", backend: StatefulSet}`, change: `{version: "17"}`,
			want: []string{"spec.version", "StatefulSet backend", "pg_upgrade"}},
		{name: "mysql series downgrade", spec: `{engine: mysql, version: "8.4"}`, change: `{version: "8.0"}`,
			want: []string{"spec.version", "mysql", "older series"}},
		{name: "mysql downgrade from the default", spec: `{engine: mysql}`, change: `{version: "8.0.36"}`,
			want: []string{"spec.version", "older series"}},
		{name: "storage shrink", spec: `{storage: {size: 2Gi}}`, change: `{storage: {size: 1Gi}}`,
			want: []string{"spec.storage.size", "cannot shrink"}},

		{name: "postgres major upgrade of an Independent Database", spec: `{version: "16"}`, change: `{version: "17"}`},
		{name: "postgres major upgrade, versions as numbers", spec: `{version: 16}`, change: `{version: 17}`},
		{name: "postgres minor change either way", spec: `{version: "16.4"}`, change: `{version: "16.2"}`},
		{name: "postgres minor change of a PrimaryStandby Database", spec: `{version: "16.2", ` + primaryStandby + `}`, change: `{version: "16.4"}`},
		{name: "postgres minor change on the StatefulSet backend", spec: `{version: "16", backend: StatefulSet}`, change: `{version: "16.4"}`},
		{name: "mysql series upgrade", spec: `{engine: mysql, version: "8.0"}`, change: `{version: "8.4"}`},
		{name: "mysql patch change", spec: `{engine: mysql, version: "8.4.2"}`, change: `{version: "8.4.1"}`},
		{name: "storage grows", spec: `{storage: {size: 1Gi}}`, change: `{storage: {size: 2Gi}}`},
		{name: "storage the same in other units", spec: `{storage: {size: 1Gi}}`, change: `{storage: {size: 1024Mi}}`},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			db := database(t, fmt.Sprintf("change-%d", i), tc.spec)
			g.Expect(hub.Create(ctx(t), db)).To(Succeed(), "the created spec is valid")
			g.Expect(hub.Get(ctx(t), client.ObjectKeyFromObject(db), db)).To(Succeed())
			change := map[string]any{}
			mustYAML(t, tc.change, &change)
			for k, v := range change {
				g.Expect(unstructured.SetNestedField(db.Object, v, "spec", k)).To(Succeed())
			}
			err := hub.Update(ctx(t), db)
			if len(tc.want) == 0 {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
		})
	}
}

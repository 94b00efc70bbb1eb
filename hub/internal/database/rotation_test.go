package database

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestRotationBackoff(t *testing.T) {
	g := NewWithT(t)
	g.Expect(rotationBackoff(1)).To(Equal(rotationRetryBase))
	g.Expect(rotationBackoff(2)).To(Equal(2 * rotationRetryBase))
	g.Expect(rotationBackoff(3)).To(Equal(4 * rotationRetryBase))
	g.Expect(rotationBackoff(100)).To(Equal(rotationRetryMax))
	g.Expect(rotationRetryMax).To(BeNumerically(">=", time.Minute))
}

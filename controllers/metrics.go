package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	phaseTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "workbench_phase_transitions_total",
		Help: "Phase changes observed by the manager, per kind and new phase.",
	}, []string{"kind", "phase"})
	refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "workbench_refusals_total",
		Help: "Refusals recorded by the manager, per kind and refusal code.",
	}, []string{"kind", "code"})
)

func init() { metrics.Registry.MustRegister(phaseTransitions, refusals) }

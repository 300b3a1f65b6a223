package nodeagent

import (
	"sensorium.dev/workbench/internal/test/kstate"
)

// wantKStatus reads obj, as the API server returned it, through kstatus (the health
// library behind Flux and apply-and-wait tools) and fails unless it computes want.
var wantKStatus = kstate.WantKStatus

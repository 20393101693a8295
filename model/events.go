package model

// LongWaitDetected says a queue's oldest ready job has waited longer than
// the queue's threshold ([fleet.long_wait]): what the master's alerts
// deliver and what fleet.Service.LongWaits lists.
type LongWaitDetected struct {
	Queue         string  `json:"queue"`
	WaitSecs      float64 `json:"wait_secs"`
	ThresholdSecs int     `json:"threshold_secs"`
}

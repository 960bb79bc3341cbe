// MeterSimulator module.

// GlucoseProfile module.

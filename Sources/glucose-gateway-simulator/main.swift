import Support

// The meter simulator, a program of its own so the gateway does not carry it: a test double for the
// system tests and the real-stack bed, and the meter of the demo. No logic here (see SimulatorMain); it
// starts as the gateway does (`Program.run`).
Program.run { arguments, environment in await SimulatorMain.main(arguments, environment: environment) }

#if canImport(Glibc)
import Glibc
#endif
import GatewayCLI

// No logic here: the command line lives in GatewayCLI.
let status = await GatewayMain.main(Array(CommandLine.arguments.dropFirst()), environment: ProcessEnvironment.current())
exit(status)

// Package modules holds the tests that span the repository's Go modules.
//
// The client (client/), each broker adapter (client/<broker>/), the
// libraries they share with the server (digest/, api/gridpb/,
// internal/testwait/) and the client's tests against a real server
// (client/internal/servertest/) are modules of their own, so that a
// consumer importing the client does not take the server's dependencies
// into its module graph (docs/modules.md). `go test ./...` at the root
// reaches only the root module; TestNestedModules runs every other
// module's tests as part of it, with the same flags (-race, -short), and
// TestModulesAreTidy and TestConsumerModuleGraph check the split itself.
package modules

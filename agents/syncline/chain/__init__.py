"""The edge to an EVM chain: toolchain, devnet, keys, deployment and the market client."""

// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {SynclineStorage} from "../../src/SynclineStorage.sol";
import {Commitment, Vote} from "../../src/SynclineTypes.sol";

/// @title SignedMessagesHarness
/// @notice Test harness: the market's own EIP-712 digests and signer recovery of Syncline's signed
/// messages (trainer `Commitment`, witness `Vote`) — the `SynclineStorage` helpers the market and
/// its court run — so the Python signer (`syncline.protocol.signed_messages`) and the test
/// suite's independent digests can be checked against the chain's code.
contract SignedMessagesHarness is SynclineStorage {
    /// @notice keccak256 of the Commitment type.
    function commitmentTypehash() external pure returns (bytes32) {
        return COMMITMENT_TYPEHASH;
    }

    /// @notice keccak256 of the Vote type.
    function voteTypehash() external pure returns (bytes32) {
        return VOTE_TYPEHASH;
    }

    /// @notice EIP-712 digest of a trainer commitment in this contract's domain.
    function commitmentDigest(Commitment calldata c) external view returns (bytes32) {
        return _commitmentDigest(c);
    }

    /// @notice EIP-712 digest of a witness vote in this contract's domain.
    function voteDigest(Vote calldata v) external view returns (bytes32) {
        return _voteDigest(v);
    }

    /// @notice Signer of a commitment (reverts `SynclineBadSignature` on a malformed signature).
    function recoverCommitment(Commitment calldata c, bytes calldata signature) external view returns (address) {
        return _recover(_commitmentDigest(c), signature);
    }

    /// @notice Signer of a vote (reverts `SynclineBadSignature` on a malformed signature).
    function recoverVote(Vote calldata v, bytes calldata signature) external view returns (address) {
        return _recover(_voteDigest(v), signature);
    }
}

// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";

/// @title SignedMessagesHarness
/// @notice Test harness: the EIP-712 digests and signer recovery of Syncline's signed messages
/// (trainer `Commitment`, witness `Vote`), with OpenZeppelin's EIP712 and ECDSA, so the Python
/// signer (`syncline.protocol.signed_messages`) can be checked against the chain.
contract SignedMessagesHarness is EIP712 {
    /// @notice keccak256 of the Commitment type.
    bytes32 public constant COMMITMENT_TYPEHASH = keccak256(
        "Commitment(uint256 taskId,uint32 round,uint16 fragment,bytes32 payloadHash,bytes32 chunkRoot,bytes32 checkpointRoot)"
    );
    /// @notice keccak256 of the Vote type.
    bytes32 public constant VOTE_TYPEHASH =
        keccak256("Vote(uint256 taskId,uint32 round,bytes32 stateRoot,bytes32 aggregateRoot,uint256 acceptedMask)");

    constructor() EIP712("Syncline", "1") {}

    /// @notice EIP-712 digest of a trainer commitment in this contract's domain.
    function commitmentDigest(
        uint256 taskId,
        uint32 round,
        uint16 fragment,
        bytes32 payloadHash,
        bytes32 chunkRoot,
        bytes32 checkpointRoot
    ) public view returns (bytes32) {
        return _hashTypedDataV4(
            keccak256(abi.encode(COMMITMENT_TYPEHASH, taskId, round, fragment, payloadHash, chunkRoot, checkpointRoot))
        );
    }

    /// @notice EIP-712 digest of a witness vote in this contract's domain.
    function voteDigest(uint256 taskId, uint32 round, bytes32 stateRoot, bytes32 aggregateRoot, uint256 acceptedMask)
        public
        view
        returns (bytes32)
    {
        return _hashTypedDataV4(keccak256(abi.encode(VOTE_TYPEHASH, taskId, round, stateRoot, aggregateRoot, acceptedMask)));
    }

    /// @notice Signer of a commitment (reverts on a malformed signature).
    function recoverCommitment(
        uint256 taskId,
        uint32 round,
        uint16 fragment,
        bytes32 payloadHash,
        bytes32 chunkRoot,
        bytes32 checkpointRoot,
        bytes calldata signature
    ) external view returns (address) {
        return ECDSA.recover(commitmentDigest(taskId, round, fragment, payloadHash, chunkRoot, checkpointRoot), signature);
    }

    /// @notice Signer of a vote (reverts on a malformed signature).
    function recoverVote(
        uint256 taskId,
        uint32 round,
        bytes32 stateRoot,
        bytes32 aggregateRoot,
        uint256 acceptedMask,
        bytes calldata signature
    ) external view returns (address) {
        return ECDSA.recover(voteDigest(taskId, round, stateRoot, aggregateRoot, acceptedMask), signature);
    }
}

// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {TestBase} from "./TestBase.sol";
import {Commitment, Vote} from "../../src/SynclineTypes.sol";

/// @title SynclineSigning
/// @notice Actors with private keys, and the EIP-712 digests and signatures of Syncline's signed
/// messages (trainer `Commitment`, witness `Vote`), computed here from the type strings and the
/// domain fields alone, never by asking the market, so the tests check the contract against an
/// independent implementation of EIP-712.
abstract contract SynclineSigning is TestBase {
    /// @dev Order of the secp256k1 group; a private key is in [1, N - 1] and a canonical s is <= N / 2.
    uint256 internal constant SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141;

    bytes32 internal constant EIP712_DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 internal constant DOMAIN_NAME_HASH = keccak256("Syncline");
    bytes32 internal constant DOMAIN_VERSION_HASH = keccak256("1");
    bytes32 internal constant COMMITMENT_TYPEHASH = keccak256(
        "Commitment(uint256 taskId,uint32 round,uint16 fragment,bytes32 payloadHash,bytes32 chunkRoot,bytes32 checkpointRoot,string uri)"
    );
    bytes32 internal constant VOTE_TYPEHASH = keccak256(
        "Vote(uint256 taskId,uint32 round,bytes32 prevStateRoot,bytes32 stateRoot,bytes32 aggregateRoot,uint256 acceptedMask,uint256 metric)"
    );

    /// @dev Private key of every actor made by `_keyedActor`.
    mapping(address account => uint256 privateKey) internal _keys;

    // ------------------------------------------------------------------ actors

    /// @dev A deterministic private key for `seed`, and its address; remembers the key.
    function _keyedActor(string memory seed) internal returns (address a) {
        uint256 pk = (uint256(keccak256(abi.encodePacked("syncline-key", seed))) % (SECP256K1_N - 1)) + 1;
        a = vm.addr(pk);
        _keys[a] = pk;
    }

    /// @dev The private key of an actor made by `_keyedActor`.
    function _keyOf(address account) internal view returns (uint256 pk) {
        pk = _keys[account];
        require(pk != 0, "SynclineSigning: no key for this account");
    }

    // ------------------------------------------------------------------ EIP-712

    /// @dev The domain separator of ("Syncline", "1", chainId, verifyingContract).
    function _domainSeparator(address verifyingContract, uint256 chainId) internal pure returns (bytes32) {
        return keccak256(
            abi.encode(EIP712_DOMAIN_TYPEHASH, DOMAIN_NAME_HASH, DOMAIN_VERSION_HASH, chainId, verifyingContract)
        );
    }

    function _typedDigest(bytes32 domainSeparator, bytes32 structHash) internal pure returns (bytes32) {
        return keccak256(abi.encodePacked(hex"1901", domainSeparator, structHash));
    }

    function _commitmentStructHash(Commitment memory c) internal pure returns (bytes32) {
        return keccak256(
            abi.encode(
                COMMITMENT_TYPEHASH,
                c.taskId,
                c.round,
                c.fragment,
                c.payloadHash,
                c.chunkRoot,
                c.checkpointRoot,
                keccak256(bytes(c.uri))
            )
        );
    }

    function _voteStructHash(Vote memory v) internal pure returns (bytes32) {
        return keccak256(
            abi.encode(
                VOTE_TYPEHASH,
                v.taskId,
                v.round,
                v.prevStateRoot,
                v.stateRoot,
                v.aggregateRoot,
                v.acceptedMask,
                v.metric
            )
        );
    }

    /// @dev EIP-712 digest of a commitment for the market at `verifyingContract` on `chainId`.
    function _commitmentDigest(Commitment memory c, address verifyingContract, uint256 chainId)
        internal
        pure
        returns (bytes32)
    {
        return _typedDigest(_domainSeparator(verifyingContract, chainId), _commitmentStructHash(c));
    }

    /// @dev EIP-712 digest of a vote for the market at `verifyingContract` on `chainId`.
    function _voteDigest(Vote memory v, address verifyingContract, uint256 chainId) internal pure returns (bytes32) {
        return _typedDigest(_domainSeparator(verifyingContract, chainId), _voteStructHash(v));
    }

    // ------------------------------------------------------------------ signatures

    /// @dev A 65-byte signature r || s || v.
    function _signDigest(uint256 pk, bytes32 digest) internal pure returns (bytes memory) {
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(pk, digest);
        return abi.encodePacked(r, s, v);
    }

    /// @dev `pk`'s signature of `c` for the market at `verifyingContract` on the current chain.
    function _signCommitment(uint256 pk, Commitment memory c, address verifyingContract)
        internal
        view
        returns (bytes memory)
    {
        return _signDigest(pk, _commitmentDigest(c, verifyingContract, block.chainid));
    }

    /// @dev `pk`'s signature of `v` for the market at `verifyingContract` on the current chain.
    function _signVote(uint256 pk, Vote memory v, address verifyingContract) internal view returns (bytes memory) {
        return _signDigest(pk, _voteDigest(v, verifyingContract, block.chainid));
    }

    /// @dev The same signature with s' = N - s and the parity flipped: it recovers to the same
    /// signer under plain ecrecover, but is non-canonical (high s) and must be refused.
    function _malleate(bytes memory sig) internal pure returns (bytes memory) {
        (bytes32 r, bytes32 s, uint8 v) = _split(sig);
        return abi.encodePacked(r, bytes32(SECP256K1_N - uint256(s)), v == 27 ? uint8(28) : uint8(27));
    }

    function _split(bytes memory sig) internal pure returns (bytes32 r, bytes32 s, uint8 v) {
        require(sig.length == 65, "SynclineSigning: not a 65-byte signature");
        // assembly: reads the three words of a 65-byte signature.
        assembly ("memory-safe") {
            r := mload(add(sig, 0x20))
            s := mload(add(sig, 0x40))
            v := byte(0, mload(add(sig, 0x60)))
        }
    }

    /// @dev What OpenZeppelin's ECDSA.tryRecover accepts, and the signer it returns (zero: refused).
    function _ecrecover(bytes32 digest, bytes memory sig) internal pure returns (address) {
        if (sig.length != 65) return address(0);
        (bytes32 r, bytes32 s, uint8 v) = _split(sig);
        if (uint256(s) > SECP256K1_N / 2) return address(0);
        return ecrecover(digest, v, r, s);
    }
}

// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {SynclineTest} from "../base/SynclineTest.sol";
import {ISynclineConfidential} from "../../src/ISynclineConfidential.sol";
import {DevnetAttestationVerifier} from "../../src/attestation/DevnetAttestationVerifier.sol";
import {TaskSpec, Tier, AggregationRule} from "../../src/SynclineTypes.sol";

/// @title ConfidentialTestBase
/// @notice A market with a devnet attestation verifier whose service key the tests hold, a
/// Confidential spec, and helpers that issue reports and enroll attested trainers.
abstract contract ConfidentialTestBase is SynclineTest {
    bytes32 internal constant REPORT_TYPEHASH =
        keccak256("AttestationReport(bytes32 enclavePubkey,bytes32 measurement,address operator,uint64 issuedAt)");
    bytes32 internal constant GOOD = keccak256("syncline-trainer-image-v1");
    bytes32 internal constant OTHER = keccak256("syncline-trainer-image-v2");
    bytes32 internal constant BAD = keccak256("debug-image");
    uint64 internal constant ISSUED = 1_699_999_000;

    /// @dev The market addressed through its confidential functions.
    ISynclineConfidential internal conf;
    DevnetAttestationVerifier internal verifier;
    address internal service;

    function setUp() public virtual override {
        super.setUp();
        conf = ISynclineConfidential(address(market));
        service = _keyedActor("attestation-service");
        verifier = new DevnetAttestationVerifier(service);
        vm.label(address(verifier), "DevnetAttestationVerifier");
    }

    /// @dev The default spec at the Confidential tier (which needs a robust rule).
    function _confidentialSpec() internal view returns (TaskSpec memory s) {
        s = _defaultSpec();
        s.tier = Tier.Confidential;
        s.rule = AggregationRule.CoordinateMedian;
    }

    function _allowList() internal pure returns (bytes32[] memory ms) {
        ms = new bytes32[](2);
        ms[0] = GOOD;
        ms[1] = OTHER;
    }

    /// @dev Posts a Confidential task, bonds its witnesses and configures (verifier, [GOOD, OTHER]).
    function _postConfidential() internal returns (uint256 taskId) {
        taskId = _post(_confidentialSpec(), POOL);
        _bondAll(taskId);
        vm.prank(sponsor);
        conf.configureConfidential(taskId, address(verifier), _allowList());
    }

    /// @dev A canonical X25519 key per account: the top bit of its last (most significant) byte
    /// cleared, so its little-endian u-coordinate is below 2^255 (and, for a hash, not small-order).
    function _enclaveKey(address account) internal pure returns (bytes32) {
        return bytes32(uint256(keccak256(abi.encodePacked("enclave-x25519", account))) & ~uint256(0x80));
    }

    /// @dev The EIP-712 digest of a report under the domain of `verifyingContract` on `chainId`.
    function _reportDigest(
        bytes32 key,
        bytes32 measurement,
        address operator,
        uint64 issuedAt,
        address verifyingContract,
        uint256 chainId
    ) internal pure returns (bytes32) {
        bytes32 domain = keccak256(
            abi.encode(
                EIP712_DOMAIN_TYPEHASH,
                keccak256("Syncline Devnet Attestation"),
                keccak256("1"),
                chainId,
                verifyingContract
            )
        );
        bytes32 structHash = keccak256(abi.encode(REPORT_TYPEHASH, key, measurement, operator, issuedAt));
        return _typedDigest(domain, structHash);
    }

    /// @dev A report signed by `pk` for the test verifier on the current chain.
    function _reportBy(uint256 pk, bytes32 key, bytes32 measurement, address operator, uint64 issuedAt)
        internal
        view
        returns (bytes memory)
    {
        bytes32 digest = _reportDigest(key, measurement, operator, issuedAt, address(verifier), block.chainid);
        return abi.encodePacked(abi.encode(key, measurement, operator, issuedAt), _signDigest(pk, digest));
    }

    /// @dev The service's report binding `key`, `measurement` and `operator`.
    function _report(bytes32 key, bytes32 measurement, address operator) internal view returns (bytes memory) {
        return _reportBy(_keyOf(service), key, measurement, operator, ISSUED);
    }

    /// @dev `trainer` enrolls with its own enclave key, measurement GOOD and an honest report.
    function _enrollAttested(uint256 taskId, address trainer) internal returns (uint16 fragment) {
        bytes32 key = _enclaveKey(trainer);
        bytes memory report = _report(key, GOOD, trainer);
        uint256 stake = market.getSpec(taskId).trainerStake;
        vm.prank(trainer);
        fragment = conf.enrollAttested{value: stake}(taskId, key, GOOD, report);
    }
}

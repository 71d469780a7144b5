// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ConfidentialTestBase} from "./ConfidentialTestBase.sol";
import {DevnetAttestationVerifier} from "../../src/attestation/DevnetAttestationVerifier.sol";

/// @notice The devnet verifier alone: what it returns for a good report, each of its reverts, and
/// fuzzed report fields (every field is bound by the signature, the domain binds chain and verifier).
contract DevnetAttestationVerifierTest is ConfidentialTestBase {
    function test_verify_returnsTheBoundFields_succeeds() public view {
        bytes memory report = _report(keccak256("k"), GOOD, trainers[0]);
        vm.assertEq(report.length, verifier.REPORT_LENGTH(), "193 bytes");
        (bytes32 key, bytes32 m, address op, uint64 at) = verifier.verify(report);
        vm.assertEq(key, keccak256("k"), "key");
        vm.assertEq(m, GOOD, "measurement");
        vm.assertEq(op, trainers[0], "operator");
        vm.assertEq(uint256(at), ISSUED, "issuedAt");
        vm.assertEq(
            verifier.reportDigest(keccak256("k"), GOOD, trainers[0], ISSUED),
            _reportDigest(keccak256("k"), GOOD, trainers[0], ISSUED, address(verifier), block.chainid),
            "digest"
        );
        vm.assertEq(verifier.SERVICE(), service, "service");
    }

    function test_constructor_zeroService_reverts() public {
        vm.expectRevert(DevnetAttestationVerifier.DevnetAttestationZeroService.selector);
        new DevnetAttestationVerifier(address(0));
    }

    function test_verify_shortReport_reverts() public {
        bytes memory report = _report(keccak256("k"), GOOD, trainers[0]);
        bytes memory short = new bytes(192);
        for (uint256 i = 0; i < 192; ++i) {
            short[i] = report[i];
        }
        vm.expectRevert(abi.encodeWithSelector(DevnetAttestationVerifier.DevnetAttestationBadLength.selector, 192, 193));
        verifier.verify(short);
    }

    function test_verify_trailingByte_reverts() public {
        bytes memory report = abi.encodePacked(_report(keccak256("k"), GOOD, trainers[0]), bytes1(0));
        vm.expectRevert(abi.encodeWithSelector(DevnetAttestationVerifier.DevnetAttestationBadLength.selector, 194, 193));
        verifier.verify(report);
    }

    function test_verify_dirtyOperatorWord_reverts() public {
        bytes memory report = _report(keccak256("k"), GOOD, trainers[0]);
        report[64] = 0x01; // a high byte of the operator word
        vm.expectRevert(
            abi.encodeWithSelector(DevnetAttestationVerifier.DevnetAttestationMalformed.selector, "operator")
        );
        verifier.verify(report);
    }

    function test_verify_dirtyIssuedAtWord_reverts() public {
        bytes memory report = _report(keccak256("k"), GOOD, trainers[0]);
        report[96] = 0x01; // a high byte of the issuedAt word
        vm.expectRevert(
            abi.encodeWithSelector(DevnetAttestationVerifier.DevnetAttestationMalformed.selector, "issuedAt")
        );
        verifier.verify(report);
    }

    function test_verify_malleableSignature_reverts() public {
        bytes32 key = keccak256("k");
        bytes32 digest = _reportDigest(key, GOOD, trainers[0], ISSUED, address(verifier), block.chainid);
        bytes memory sig = _malleate(_signDigest(_keyOf(service), digest));
        bytes memory report = abi.encodePacked(abi.encode(key, GOOD, trainers[0], ISSUED), sig);
        vm.expectRevert(DevnetAttestationVerifier.DevnetAttestationBadSignature.selector);
        verifier.verify(report);
    }

    function test_verify_badV_reverts() public {
        bytes memory report = _report(keccak256("k"), GOOD, trainers[0]);
        report[192] = bytes1(uint8(29));
        vm.expectRevert(DevnetAttestationVerifier.DevnetAttestationBadSignature.selector);
        verifier.verify(report);
    }

    function test_verify_otherSigner_reverts() public {
        bytes memory report = _reportBy(_keyOf(stranger), keccak256("k"), GOOD, trainers[0], ISSUED);
        vm.expectRevert(
            abi.encodeWithSelector(DevnetAttestationVerifier.DevnetAttestationWrongSigner.selector, stranger, service)
        );
        verifier.verify(report);
    }

    function test_verify_otherChain_reverts() public {
        bytes memory report = _report(keccak256("k"), GOOD, trainers[0]);
        vm.chainId(block.chainid + 1);
        vm.expectRevert(); // recovers to an unrelated key: DevnetAttestationWrongSigner(someone, service)
        verifier.verify(report);
    }

    function test_verify_otherVerifier_reverts() public {
        DevnetAttestationVerifier second = new DevnetAttestationVerifier(service);
        bytes memory report = _report(keccak256("k"), GOOD, trainers[0]); // for `verifier`
        vm.expectRevert();
        second.verify(report);
    }

    /// @dev Any fields the service signs come back exactly.
    function testFuzz_verify_roundTrip(bytes32 key, bytes32 measurement, address operator, uint64 issuedAt)
        public
        view
    {
        bytes memory report = _reportBy(_keyOf(service), key, measurement, operator, issuedAt);
        (bytes32 k, bytes32 m, address op, uint64 at) = verifier.verify(report);
        vm.assertEq(k, key, "key");
        vm.assertEq(m, measurement, "measurement");
        vm.assertEq(op, operator, "operator");
        vm.assertEq(uint256(at), uint256(issuedAt), "issuedAt");
    }

    /// @dev Changing any bit of any signed field after signing makes the report fail: the
    /// signature recovers to another key (or none).
    function testFuzz_verify_tamperedField_reverts(
        bytes32 key,
        bytes32 measurement,
        address operator,
        uint64 issuedAt,
        uint256 field,
        uint256 bit
    ) public {
        bytes memory report = _reportBy(_keyOf(service), key, measurement, operator, issuedAt);
        field = bound(field, 0, 3);
        // the significant bits of each word: 256, 256, 160 (address), 64 (uint64)
        uint256 width = field < 2 ? 256 : (field == 2 ? 160 : 64);
        bit = bound(bit, 0, width - 1);
        uint256 byteIndex = field * 32 + 31 - bit / 8;
        uint256 flip = 2 ** (bit % 8);
        // casting to 'uint8' is safe because flip <= 128
        // forge-lint: disable-next-line(unsafe-typecast)
        report[byteIndex] = bytes1(uint8(report[byteIndex]) ^ uint8(flip));
        vm.expectRevert();
        verifier.verify(report);
    }

    /// @dev Through the market: a fuzzed claim differing from the attested one in the key or the
    /// measurement is refused with the error naming exactly that difference.
    function testFuzz_enrollAttested_claimDiffers_reverts(bytes32 claimedKey, bool keyDiffers) public {
        uint256 id = _postConfidential();
        address t = trainers[0];
        bytes32 attestedKey = _enclaveKey(t);
        // A usable X25519 key (else SynclineX25519KeyInvalid comes first): the little-endian u
        // below p - 1 (top bits of its last byte cleared) and above 1 (a middle byte's bit set).
        claimedKey = bytes32((uint256(claimedKey) & ~uint256(0xc0)) | (uint256(1) << 128));
        vm.assume(claimedKey != attestedKey);
        bytes memory report = _report(attestedKey, GOOD, t);
        vm.prank(t);
        if (keyDiffers) {
            vm.expectRevert(
                abi.encodeWithSignature("SynclineAttestationPubkeyMismatch(bytes32,bytes32)", claimedKey, attestedKey)
            );
            conf.enrollAttested{value: STAKE}(id, claimedKey, GOOD, report);
        } else {
            vm.expectRevert(
                abi.encodeWithSignature("SynclineAttestationMeasurementMismatch(bytes32,bytes32)", OTHER, GOOD)
            );
            conf.enrollAttested{value: STAKE}(id, attestedKey, OTHER, report);
        }
    }
}

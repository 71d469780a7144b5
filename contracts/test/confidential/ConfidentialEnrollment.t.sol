// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "../base/Vm.sol";

import {ConfidentialTestBase} from "./ConfidentialTestBase.sol";
import {ISynclineEvents} from "../../src/ISynclineEvents.sol";
import {SynclineConfidential} from "../../src/SynclineConfidential.sol";
import {SynclineCourt} from "../../src/SynclineCourt.sol";
import {DevnetAttestationVerifier} from "../../src/attestation/DevnetAttestationVerifier.sol";
import {TaskState, TaskStatus, TrainerRecord} from "../../src/SynclineTypes.sol";

/// @notice `configureConfidential`, `enrollAttested` and `registerWitnessEnclave`: every revert,
/// the parity check's every mismatch, and the effects of an admission.
contract ConfidentialEnrollmentTest is ConfidentialTestBase {
    // ================================================================== configureConfidential

    function test_configure_setsPolicyAndEmits_succeeds() public {
        uint256 id = _post(_confidentialSpec(), POOL);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ConfidentialConfigured(id, address(verifier), _allowList());
        vm.prank(sponsor);
        conf.configureConfidential(id, address(verifier), _allowList());
        (address v, bytes32[] memory ms) = conf.getConfidentialConfig(id);
        vm.assertEq(v, address(verifier), "verifier");
        vm.assertEq(ms.length, 2, "two measurements");
        vm.assertEq(ms[0], GOOD, "first");
        vm.assertEq(ms[1], OTHER, "second");
    }

    function test_configure_unknownTask_reverts() public {
        vm.prank(sponsor);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 9));
        conf.configureConfidential(9, address(verifier), _allowList());
    }

    function test_configure_notSponsor_reverts() public {
        uint256 id = _post(_confidentialSpec(), POOL);
        vm.prank(stranger);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotSponsor.selector, id, stranger));
        conf.configureConfidential(id, address(verifier), _allowList());
    }

    function test_configure_notConfidential_reverts() public {
        uint256 id = _post(_bondedSpec(), POOL);
        vm.prank(sponsor);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotConfidential.selector, id));
        conf.configureConfidential(id, address(verifier), _allowList());
    }

    function test_configure_twice_reverts() public {
        uint256 id = _postConfidential();
        vm.prank(sponsor);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineConfidentialAlreadyConfigured.selector, id, address(verifier)
            )
        );
        conf.configureConfidential(id, address(verifier), _allowList());
    }

    function test_configure_afterFirstEnrollment_reverts() public {
        uint256 id = _postConfidential();
        _enrollAttested(id, trainers[0]);
        vm.prank(sponsor);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineEnrollmentStarted.selector, id, uint16(1)));
        conf.configureConfidential(id, address(verifier), _allowList());
    }

    function test_configure_notEnrolling_reverts() public {
        uint256 id = _post(_confidentialSpec(), POOL);
        warpTo(block.timestamp + ENROLL_PERIOD + 1);
        market.cancelUnderfilled(id);
        vm.prank(sponsor);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, id, TaskStatus.Cancelled, TaskStatus.Enrolling
            )
        );
        conf.configureConfidential(id, address(verifier), _allowList());
    }

    function test_configure_verifierWithoutCode_reverts() public {
        uint256 id = _post(_confidentialSpec(), POOL);
        vm.prank(sponsor);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineVerifierInvalid.selector, stranger));
        conf.configureConfidential(id, stranger, _allowList());
    }

    function test_configure_emptyAllowList_reverts() public {
        uint256 id = _post(_confidentialSpec(), POOL);
        vm.prank(sponsor);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineMeasurementCount.selector, 0, 16));
        conf.configureConfidential(id, address(verifier), new bytes32[](0));
    }

    function test_configure_allowListTooLong_reverts() public {
        uint256 id = _post(_confidentialSpec(), POOL);
        bytes32[] memory ms = new bytes32[](17);
        for (uint256 i = 0; i < 17; ++i) {
            ms[i] = keccak256(abi.encode(i));
        }
        vm.prank(sponsor);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineMeasurementCount.selector, 17, 16));
        conf.configureConfidential(id, address(verifier), ms);
    }

    function test_configure_sixteenMeasurements_succeeds() public {
        uint256 id = _post(_confidentialSpec(), POOL);
        bytes32[] memory ms = new bytes32[](16);
        for (uint256 i = 0; i < 16; ++i) {
            ms[i] = keccak256(abi.encode(i));
        }
        vm.prank(sponsor);
        conf.configureConfidential(id, address(verifier), ms);
        (, bytes32[] memory stored) = conf.getConfidentialConfig(id);
        vm.assertEq(stored.length, 16, "all sixteen");
    }

    function test_configure_zeroMeasurement_reverts() public {
        uint256 id = _post(_confidentialSpec(), POOL);
        bytes32[] memory ms = _allowList();
        ms[1] = bytes32(0);
        vm.prank(sponsor);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineMeasurementInvalid.selector, 1, bytes32(0)));
        conf.configureConfidential(id, address(verifier), ms);
    }

    function test_configure_duplicateMeasurement_reverts() public {
        uint256 id = _post(_confidentialSpec(), POOL);
        bytes32[] memory ms = _allowList();
        ms[1] = GOOD;
        vm.prank(sponsor);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineMeasurementInvalid.selector, 1, GOOD));
        conf.configureConfidential(id, address(verifier), ms);
    }

    function test_module_directCall_reverts() public {
        address module = SynclineCourt(payable(courtModule)).CONFIDENTIAL();
        vm.expectRevert(ISynclineEvents.SynclineCourtDirectCall.selector);
        SynclineConfidential(module).configureConfidential(1, address(verifier), _allowList());
        vm.expectRevert(ISynclineEvents.SynclineCourtDirectCall.selector);
        SynclineConfidential(courtModule).configureConfidential(1, address(verifier), _allowList());
    }

    // ================================================================== plain enroll

    function test_enroll_confidentialTask_reverts() public {
        uint256 id = _postConfidential();
        vm.prank(trainers[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUseEnrollAttested.selector, id));
        market.enroll{value: STAKE}(id);
    }

    // ================================================================== enrollAttested

    function test_enrollAttested_admitsAndEnrolls_succeeds() public {
        uint256 id = _postConfidential();
        address t = trainers[0];
        bytes32 key = _enclaveKey(t);
        bytes memory report = _report(key, OTHER, t);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.EnclaveAdmitted(id, t, key, OTHER);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.TrainerEnrolled(id, t, 0, STAKE);
        vm.prank(t);
        uint16 fragment = conf.enrollAttested{value: STAKE}(id, key, OTHER, report);
        vm.assertEq(uint256(fragment), 0, "fragment");
        (bytes32 k, bytes32 m) = conf.getEnclave(id, t);
        vm.assertEq(k, key, "enclave key");
        vm.assertEq(m, OTHER, "measurement");
        TrainerRecord memory r = market.getTrainer(id, t);
        vm.assertTrue(r.enrolled, "enrolled");
        vm.assertEq(uint256(r.stake), STAKE, "stake");
        TaskState memory s = market.getTaskState(id);
        vm.assertEq(s.stakeHeld, STAKE, "stake held");
        vm.assertEq(uint256(s.enrolled), 1, "one enrolled");
    }

    function test_enrollAttested_lastEnrollmentStartsTheRun_succeeds() public {
        uint256 id = _postConfidential();
        for (uint256 i = 0; i + 1 < MAX_TRAINERS; ++i) {
            _enrollAttested(id, trainers[i]);
        }
        _assertStatus(id, TaskStatus.Enrolling, "still enrolling");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RunStarted(id, MAX_TRAINERS, keccak256("initial-state"));
        _enrollAttested(id, trainers[MAX_TRAINERS - 1]);
        _assertStatus(id, TaskStatus.Running, "run started");
        _assertShardPartition(id);
    }

    function test_enrollAttested_unknownTask_reverts() public {
        bytes memory report = _report(_enclaveKey(trainers[0]), GOOD, trainers[0]);
        vm.prank(trainers[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 7));
        conf.enrollAttested{value: STAKE}(7, _enclaveKey(trainers[0]), GOOD, report);
    }

    function test_enrollAttested_notConfigured_reverts() public {
        uint256 id = _post(_confidentialSpec(), POOL);
        address t = trainers[0];
        bytes memory report = _report(_enclaveKey(t), GOOD, t);
        vm.prank(t);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineConfidentialNotConfigured.selector, id));
        conf.enrollAttested{value: STAKE}(id, _enclaveKey(t), GOOD, report);
    }

    function test_enrollAttested_openTask_notConfigured_reverts() public {
        uint256 id = _postDefault();
        address t = trainers[0];
        bytes memory report = _report(_enclaveKey(t), GOOD, t);
        vm.prank(t);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineConfidentialNotConfigured.selector, id));
        conf.enrollAttested{value: STAKE}(id, _enclaveKey(t), GOOD, report);
    }

    function test_enrollAttested_zeroKey_reverts() public {
        uint256 id = _postConfidential();
        address t = trainers[0];
        bytes memory report = _report(bytes32(0), GOOD, t);
        vm.prank(t);
        vm.expectRevert(ISynclineEvents.SynclineZeroEnclaveKey.selector);
        conf.enrollAttested{value: STAKE}(id, bytes32(0), GOOD, report);
    }

    function test_enrollAttested_reportTooLarge_reverts() public {
        uint256 id = _postConfidential();
        vm.prank(trainers[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineReportTooLarge.selector, 16_385, 16_384));
        conf.enrollAttested{value: STAKE}(id, _enclaveKey(trainers[0]), GOOD, new bytes(16_385));
    }

    function test_enrollAttested_pubkeyMismatch_reverts() public {
        uint256 id = _postConfidential();
        address t = trainers[0];
        bytes32 attested = _enclaveKey(t);
        bytes32 claimed = _enclaveKey(stranger);
        bytes memory report = _report(attested, GOOD, t);
        vm.prank(t);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineAttestationPubkeyMismatch.selector, claimed, attested)
        );
        conf.enrollAttested{value: STAKE}(id, claimed, GOOD, report);
    }

    function test_enrollAttested_measurementMismatch_reverts() public {
        uint256 id = _postConfidential();
        address t = trainers[0];
        bytes memory report = _report(_enclaveKey(t), GOOD, t);
        vm.prank(t);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineAttestationMeasurementMismatch.selector, OTHER, GOOD)
        );
        conf.enrollAttested{value: STAKE}(id, _enclaveKey(t), OTHER, report);
    }

    function test_enrollAttested_operatorMismatch_reverts() public {
        uint256 id = _postConfidential();
        address t = trainers[0];
        bytes memory report = _report(_enclaveKey(t), GOOD, t); // t's report, replayed by another account
        vm.prank(trainers[1]);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineAttestationOperatorMismatch.selector, trainers[1], t)
        );
        conf.enrollAttested{value: STAKE}(id, _enclaveKey(t), GOOD, report);
    }

    function test_enrollAttested_measurementNotAllowed_reverts() public {
        uint256 id = _postConfidential();
        address t = trainers[0];
        bytes memory report = _report(_enclaveKey(t), BAD, t); // honestly attested, not allow-listed
        vm.prank(t);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineMeasurementNotAllowed.selector, id, BAD));
        conf.enrollAttested{value: STAKE}(id, _enclaveKey(t), BAD, report);
    }

    function test_enrollAttested_enclaveKeyOfAnotherTrainer_reverts() public {
        uint256 id = _postConfidential();
        _enrollAttested(id, trainers[0]);
        bytes32 key = _enclaveKey(trainers[0]);
        bytes memory report = _report(key, GOOD, trainers[1]); // the service vouches again, for trainer 1
        vm.prank(trainers[1]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineEnclaveInUse.selector, id, key, trainers[0]));
        conf.enrollAttested{value: STAKE}(id, key, GOOD, report);
    }

    function test_enrollAttested_wrongSigner_reverts() public {
        uint256 id = _postConfidential();
        address t = trainers[0];
        bytes memory report = _reportBy(_keyOf(stranger), _enclaveKey(t), GOOD, t, ISSUED);
        vm.prank(t);
        vm.expectRevert(
            abi.encodeWithSelector(DevnetAttestationVerifier.DevnetAttestationWrongSigner.selector, stranger, service)
        );
        conf.enrollAttested{value: STAKE}(id, _enclaveKey(t), GOOD, report);
    }

    function test_enrollAttested_wrongStake_reverts() public {
        uint256 id = _postConfidential();
        address t = trainers[0];
        bytes memory report = _report(_enclaveKey(t), GOOD, t);
        vm.prank(t);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongStake.selector, STAKE - 1, STAKE));
        conf.enrollAttested{value: STAKE - 1}(id, _enclaveKey(t), GOOD, report);
    }

    function test_enrollAttested_afterDeadline_reverts() public {
        uint256 id = _postConfidential();
        uint64 deadline = market.getSpec(id).enrollmentDeadline;
        warpTo(deadline + 1);
        address t = trainers[0];
        bytes memory report = _report(_enclaveKey(t), GOOD, t);
        vm.prank(t);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineEnrollmentClosed.selector, id, deadline));
        conf.enrollAttested{value: STAKE}(id, _enclaveKey(t), GOOD, report);
    }

    function test_enrollAttested_witness_reverts() public {
        uint256 id = _postConfidential();
        address w = witnesses[0];
        bytes memory report = _report(_enclaveKey(w), GOOD, w);
        vm.prank(w);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWitnessCannotTrain.selector, id, w));
        conf.enrollAttested{value: STAKE}(id, _enclaveKey(w), GOOD, report);
    }

    function test_enrollAttested_twice_reverts() public {
        uint256 id = _postConfidential();
        address t = trainers[0];
        _enrollAttested(id, t);
        bytes32 key2 = keccak256("second enclave");
        bytes memory report = _report(key2, GOOD, t);
        vm.prank(t);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineAlreadyEnrolled.selector, id, t));
        conf.enrollAttested{value: STAKE}(id, key2, GOOD, report);
        // the same enclave again: still one line naming the duplicate enrollment
        report = _report(_enclaveKey(t), GOOD, t);
        vm.prank(t);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineAlreadyEnrolled.selector, id, t));
        conf.enrollAttested{value: STAKE}(id, _enclaveKey(t), GOOD, report);
    }

    function test_enrollAttested_running_reverts() public {
        uint256 id = _postConfidential();
        for (uint256 i = 0; i < MAX_TRAINERS; ++i) {
            _enrollAttested(id, trainers[i]);
        }
        address t = trainers[MAX_TRAINERS];
        bytes memory report = _report(_enclaveKey(t), GOOD, t);
        vm.prank(t);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, id, TaskStatus.Running, TaskStatus.Enrolling
            )
        );
        conf.enrollAttested{value: STAKE}(id, _enclaveKey(t), GOOD, report);
    }

    // ================================================================== registerWitnessEnclave

    function test_registerWitness_admits_succeeds() public {
        uint256 id = _postConfidential();
        address w = witnesses[1];
        bytes32 key = _enclaveKey(w);
        bytes memory report = _report(key, GOOD, w);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.EnclaveAdmitted(id, w, key, GOOD);
        vm.prank(w);
        conf.registerWitnessEnclave(id, key, GOOD, report);
        (bytes32 k, bytes32 m) = conf.getEnclave(id, w);
        vm.assertEq(k, key, "key");
        vm.assertEq(m, GOOD, "measurement");
    }

    function test_registerWitness_whileRunning_succeeds() public {
        uint256 id = _postConfidential();
        for (uint256 i = 0; i < MAX_TRAINERS; ++i) {
            _enrollAttested(id, trainers[i]);
        }
        address w = witnesses[2];
        bytes memory report = _report(_enclaveKey(w), OTHER, w);
        vm.prank(w);
        conf.registerWitnessEnclave(id, _enclaveKey(w), OTHER, report);
        (, bytes32 m) = conf.getEnclave(id, w);
        vm.assertEq(m, OTHER, "registered while running");
    }

    function test_registerWitness_notWitness_reverts() public {
        uint256 id = _postConfidential();
        bytes memory report = _report(_enclaveKey(stranger), GOOD, stranger);
        vm.prank(stranger);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, id, stranger));
        conf.registerWitnessEnclave(id, _enclaveKey(stranger), GOOD, report);
    }

    function test_registerWitness_twice_reverts() public {
        uint256 id = _postConfidential();
        address w = witnesses[0];
        bytes memory report = _report(_enclaveKey(w), GOOD, w);
        vm.prank(w);
        conf.registerWitnessEnclave(id, _enclaveKey(w), GOOD, report);
        vm.prank(w);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineEnclaveAlreadyRegistered.selector, id, w));
        conf.registerWitnessEnclave(id, _enclaveKey(w), GOOD, report);
    }

    function test_registerWitness_notConfigured_reverts() public {
        uint256 id = _post(_confidentialSpec(), POOL);
        address w = witnesses[0];
        bytes memory report = _report(_enclaveKey(w), GOOD, w);
        vm.prank(w);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineConfidentialNotConfigured.selector, id));
        conf.registerWitnessEnclave(id, _enclaveKey(w), GOOD, report);
    }

    function test_registerWitness_measurementMismatch_reverts() public {
        uint256 id = _postConfidential();
        address w = witnesses[0];
        bytes memory report = _report(_enclaveKey(w), GOOD, w);
        vm.prank(w);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineAttestationMeasurementMismatch.selector, OTHER, GOOD)
        );
        conf.registerWitnessEnclave(id, _enclaveKey(w), OTHER, report);
    }

    function test_registerWitness_cancelled_reverts() public {
        uint256 id = _postConfidential();
        warpTo(block.timestamp + ENROLL_PERIOD + 1);
        market.cancelUnderfilled(id);
        address w = witnesses[0];
        bytes memory report = _report(_enclaveKey(w), GOOD, w);
        vm.prank(w);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, id, TaskStatus.Cancelled, TaskStatus.Enrolling
            )
        );
        conf.registerWitnessEnclave(id, _enclaveKey(w), GOOD, report);
    }

    function test_registerWitness_unknownTask_reverts() public {
        vm.prank(witnesses[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 5));
        conf.registerWitnessEnclave(5, _enclaveKey(witnesses[0]), GOOD, "");
    }

    // ================================================================== views

    function test_views_unknownTask_reverts() public {
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 3));
        conf.getEnclave(3, trainers[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 3));
        conf.getSealedManifest(3);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 3));
        conf.getConfidentialConfig(3);
    }

    function test_views_unconfigured_areEmpty_succeeds() public {
        uint256 id = _post(_confidentialSpec(), POOL);
        (address v, bytes32[] memory ms) = conf.getConfidentialConfig(id);
        vm.assertEq(v, address(0), "no verifier");
        vm.assertEq(ms.length, 0, "no measurements");
        (bytes32 k, bytes32 m) = conf.getEnclave(id, trainers[0]);
        vm.assertEq(k, bytes32(0), "no key");
        vm.assertEq(m, bytes32(0), "no measurement");
    }
}

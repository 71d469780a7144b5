// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "../base/Vm.sol";

import {ConfidentialTestBase} from "./ConfidentialTestBase.sol";
import {ISynclineEvents} from "../../src/ISynclineEvents.sol";
import {TaskStatus} from "../../src/SynclineTypes.sol";

/// @notice `installSealedManifest` / `getSealedManifest`: versions, bounds and every revert.
contract SealedManifestTest is ConfidentialTestBase {
    bytes32 internal constant M1 = keccak256("manifest-v1");
    bytes32 internal constant M2 = keccak256("manifest-v2");

    function test_install_versionsAndEvents_succeeds() public {
        uint256 id = _postConfidential();
        (bytes32 h, string memory uri, uint32 version) = conf.getSealedManifest(id);
        vm.assertEq(h, bytes32(0), "none yet");
        vm.assertEq(bytes(uri).length, 0, "no uri");
        vm.assertEq(uint256(version), 0, "version 0");

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.SealedManifestInstalled(id, 1, M1, "ipfs://manifest-v1");
        vm.prank(sponsor);
        conf.installSealedManifest(id, M1, "ipfs://manifest-v1");

        // A late enrollee, then a new version with its envelopes.
        for (uint256 i = 0; i < MAX_TRAINERS; ++i) {
            _enrollAttested(id, trainers[i]);
        }
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.SealedManifestInstalled(id, 2, M2, "ipfs://manifest-v2");
        vm.prank(sponsor);
        conf.installSealedManifest(id, M2, "ipfs://manifest-v2");
        (h, uri, version) = conf.getSealedManifest(id);
        vm.assertEq(h, M2, "latest hash");
        vm.assertEq(uri, "ipfs://manifest-v2", "latest uri");
        vm.assertEq(uint256(version), 2, "version 2");
    }

    function test_install_beforeConfiguration_succeeds() public {
        uint256 id = _post(_confidentialSpec(), POOL);
        vm.prank(sponsor);
        conf.installSealedManifest(id, M1, "ipfs://m");
        (,, uint32 version) = conf.getSealedManifest(id);
        vm.assertEq(uint256(version), 1, "installed");
    }

    function test_install_uriAtBound_succeeds() public {
        uint256 id = _postConfidential();
        vm.prank(sponsor);
        conf.installSealedManifest(id, M1, string(new bytes(512)));
        (, string memory uri,) = conf.getSealedManifest(id);
        vm.assertEq(bytes(uri).length, 512, "512 bytes kept");
    }

    function test_install_unknownTask_reverts() public {
        vm.prank(sponsor);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 4));
        conf.installSealedManifest(4, M1, "ipfs://m");
    }

    function test_install_notSponsor_reverts() public {
        uint256 id = _postConfidential();
        vm.prank(trainers[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotSponsor.selector, id, trainers[0]));
        conf.installSealedManifest(id, M1, "ipfs://m");
    }

    function test_install_notConfidential_reverts() public {
        uint256 id = _postDefault();
        vm.prank(sponsor);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotConfidential.selector, id));
        conf.installSealedManifest(id, M1, "ipfs://m");
    }

    function test_install_zeroHash_reverts() public {
        uint256 id = _postConfidential();
        vm.prank(sponsor);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineManifestInvalid.selector, bytes32(0), 8, 512));
        conf.installSealedManifest(id, bytes32(0), "ipfs://m");
    }

    function test_install_emptyUri_reverts() public {
        uint256 id = _postConfidential();
        vm.prank(sponsor);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineManifestInvalid.selector, M1, 0, 512));
        conf.installSealedManifest(id, M1, "");
    }

    function test_install_uriTooLong_reverts() public {
        uint256 id = _postConfidential();
        vm.prank(sponsor);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineManifestInvalid.selector, M1, 513, 512));
        conf.installSealedManifest(id, M1, string(new bytes(513)));
    }

    function test_install_cancelled_reverts() public {
        uint256 id = _postConfidential();
        warpTo(block.timestamp + ENROLL_PERIOD + 1);
        market.cancelUnderfilled(id);
        vm.prank(sponsor);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, id, TaskStatus.Cancelled, TaskStatus.Running
            )
        );
        conf.installSealedManifest(id, M1, "ipfs://m");
    }
}

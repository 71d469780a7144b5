// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title Vm
/// @notice The subset of forge's cheatcodes the Syncline test suite uses. Forge serves them at
/// `address(uint160(uint256(keccak256("hevm cheat code"))))`; the assertion cheatcodes revert
/// with the given message when they fail.
interface Vm {
    /// @notice One log captured by `recordLogs`.
    struct Log {
        bytes32[] topics;
        bytes data;
        address emitter;
    }

    // ------------------------------------------------------------------ environment
    function warp(uint256 newTimestamp) external;
    function roll(uint256 newHeight) external;
    /// @notice Snapshots the whole EVM state; `revertToState` goes back to it.
    function snapshotState() external returns (uint256 snapshotId);
    function revertToState(uint256 snapshotId) external returns (bool success);
    function deal(address account, uint256 newBalance) external;
    function load(address target, bytes32 slot) external view returns (bytes32 data);
    function label(address account, string calldata newLabel) external;
    function addr(uint256 privateKey) external pure returns (address);
    /// @notice Signs `digest` with `privateKey` (secp256k1, low-s, v in {27, 28}).
    function sign(uint256 privateKey, bytes32 digest) external pure returns (uint8 v, bytes32 r, bytes32 s);
    /// @notice Sets `block.chainid`.
    function chainId(uint256 newChainId) external;
    function assume(bool condition) external pure;
    /// @notice Deploys the artifact at `artifactPath` ("File.sol:Contract"); keeps the test
    /// contracts from embedding (and re-optimizing) the market's creation code.
    function deployCode(string calldata artifactPath) external returns (address deployed);
    /// @notice Same, with ABI-encoded constructor arguments.
    function deployCode(string calldata artifactPath, bytes calldata constructorArgs)
        external
        returns (address deployed);
    /// @notice Creation code of the artifact at `artifactPath` (to deploy it by hand and see its revert).
    function getCode(string calldata artifactPath) external view returns (bytes memory creationBytecode);

    // ------------------------------------------------------------------ callers
    function prank(address msgSender) external;
    function startPrank(address msgSender) external;
    function stopPrank() external;

    // ------------------------------------------------------------------ expectations
    function expectRevert() external;
    function expectRevert(bytes4 revertData) external;
    function expectRevert(bytes calldata revertData) external;
    function expectEmit(bool checkTopic1, bool checkTopic2, bool checkTopic3, bool checkData) external;
    function expectEmit(bool checkTopic1, bool checkTopic2, bool checkTopic3, bool checkData, address emitter) external;
    function recordLogs() external;
    function getRecordedLogs() external returns (Log[] memory logs);

    // ------------------------------------------------------------------ assertions
    function assertTrue(bool condition, string calldata error) external pure;
    function assertFalse(bool condition, string calldata error) external pure;
    function assertEq(bool left, bool right, string calldata error) external pure;
    function assertEq(uint256 left, uint256 right, string calldata error) external pure;
    function assertEq(bytes32 left, bytes32 right, string calldata error) external pure;
    function assertEq(address left, address right, string calldata error) external pure;
    function assertEq(string calldata left, string calldata right, string calldata error) external pure;
    function assertEq(bytes calldata left, bytes calldata right, string calldata error) external pure;
    function assertNotEq(uint256 left, uint256 right, string calldata error) external pure;
    function assertNotEq(bytes32 left, bytes32 right, string calldata error) external pure;
    function assertLt(uint256 left, uint256 right, string calldata error) external pure;
    function assertLe(uint256 left, uint256 right, string calldata error) external pure;
    function assertGt(uint256 left, uint256 right, string calldata error) external pure;
    function assertGe(uint256 left, uint256 right, string calldata error) external pure;
}

/// @notice `vm.warp(newTimestamp)` on a chain of 12-second blocks: also rolls one block per 12 seconds
/// (or part of them) skipped, as a real chain would make them, so windows with a minimum in blocks
/// (`MIN_CHALLENGE_BLOCKS`) pass with their time.
function warpTo(uint256 newTimestamp) {
    Vm cheats = Vm(address(uint160(uint256(keccak256("hevm cheat code")))));
    if (newTimestamp > block.timestamp) cheats.roll(block.number + (newTimestamp - block.timestamp + 11) / 12);
    cheats.warp(newTimestamp);
}


// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title CourtVm
/// @notice The forge cheatcodes the court tests use (their own copy, independent of the shared
/// `contracts/test/base/Vm.sol`). Forge serves them at
/// `address(uint160(uint256(keccak256("hevm cheat code"))))`.
interface CourtVm {
    struct Log {
        bytes32[] topics;
        bytes data;
        address emitter;
    }

    // ------------------------------------------------------------------ environment
    function warp(uint256 newTimestamp) external;
    function deal(address account, uint256 newBalance) external;
    function label(address account, string calldata newLabel) external;
    function addr(uint256 privateKey) external pure returns (address);
    function sign(uint256 privateKey, bytes32 digest) external pure returns (uint8 v, bytes32 r, bytes32 s);
    function chainId(uint256 newChainId) external;
    function assume(bool condition) external pure;
    function deployCode(string calldata artifactPath) external returns (address deployed);
    function getCode(string calldata artifactPath) external view returns (bytes memory creationBytecode);
    function deployCode(string calldata artifactPath, bytes calldata constructorArgs)
        external
        returns (address deployed);

    // ------------------------------------------------------------------ callers
    function prank(address msgSender) external;
    function startPrank(address msgSender) external;
    function stopPrank() external;

    // ------------------------------------------------------------------ expectations
    function expectRevert() external;
    function expectRevert(bytes4 revertData) external;
    function expectRevert(bytes calldata revertData) external;
    function expectEmit(bool checkTopic1, bool checkTopic2, bool checkTopic3, bool checkData, address emitter) external;
    function recordLogs() external;
    function getRecordedLogs() external returns (Log[] memory logs);

    // ------------------------------------------------------------------ assertions
    function assertTrue(bool condition, string calldata error) external pure;
    function assertFalse(bool condition, string calldata error) external pure;
    function assertEq(bool left, bool right, string calldata error) external pure;
    function assertEq(uint256 left, uint256 right, string calldata error) external pure;
    function assertEq(int256 left, int256 right, string calldata error) external pure;
    function assertEq(bytes32 left, bytes32 right, string calldata error) external pure;
    function assertEq(address left, address right, string calldata error) external pure;
    function assertEq(bytes calldata left, bytes calldata right, string calldata error) external pure;
    function assertNotEq(uint256 left, uint256 right, string calldata error) external pure;
    function assertNotEq(bytes32 left, bytes32 right, string calldata error) external pure;
    function assertLt(uint256 left, uint256 right, string calldata error) external pure;
    function assertLe(uint256 left, uint256 right, string calldata error) external pure;
    function assertGt(uint256 left, uint256 right, string calldata error) external pure;
    function assertGe(uint256 left, uint256 right, string calldata error) external pure;
}

#pragma once
// The fixture the etcd-backed e2e suites share: a fresh underlay and etcd
// per test; the nodes and pods a test adds are torn down after it (weftd
// SIGKILLed), and a failing test prints the tail of every node's weftd log.

#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "e2e/cluster.h"
#include "sys/http.h"

namespace weft::testing {

class EtcdClusterTest : public ::testing::Test {
 protected:
  // `tag` names the test's scratch directory.
  explicit EtcdClusterTest(std::string tag) : tag_(std::move(tag)) {}

  void SetUp() override {
    ASSERT_TRUE(sys::InitHttp().ok());
    root_ = TempDir(tag_);
    ul_ = std::make_unique<Underlay>();
    etcd_ = std::make_unique<Etcd>(*ul_, root_);
    etcd_->Start();
    ASSERT_TRUE(etcd_->WaitHealthy()) << "etcd did not come up; see " << root_ << "/etcd.log";
  }

  void TearDown() override {
    if (HasFailure()) {
      for (auto& n : nodes_) std::cerr << n->LogTail(40000);
    }
    BeforeTeardown();
    pods_.clear();
    for (auto& n : nodes_) n->StopWeftd(SIGKILL);
    nodes_.clear();
    etcd_.reset();
    ul_.reset();
    RemoveTree(root_);
  }

  // A suite's own cleanup, run while the nodes still exist.
  virtual void BeforeTeardown() {}

  std::string tag_;
  std::string root_;
  std::unique_ptr<Underlay> ul_;
  std::unique_ptr<Etcd> etcd_;
  std::vector<std::unique_ptr<WeftNode>> nodes_;
  std::vector<std::unique_ptr<Pod>> pods_;
};

}  // namespace weft::testing

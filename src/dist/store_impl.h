// Private: constructors of the concrete stores (store_file.cpp, store_redis.cpp).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "lmcore/dist/store.h"

namespace lmcore::dist::detail {

// The port of a redis:// store URL that names none.
constexpr int kRedisDefaultPort = 6379;

std::shared_ptr<Store> make_file_store(const std::string& dir);
std::shared_ptr<Store> make_redis_store(const std::string& host, int port, std::chrono::milliseconds op_timeout);

}  // namespace lmcore::dist::detail

#include "engine/daemon/exec_relay.h"

#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "engine/daemon/daemon.h"
#include "engine/instance/exec_wire.h"

namespace abox::engine {

namespace json = boost::json;
using boost::asio::local::stream_protocol;

ExecRelay::ExecRelay(boost::asio::io_context& io, std::uint64_t id, Client client,
                     std::function<void()> on_end)
    : id_(id), client_(std::move(client)), on_end_(std::move(on_end)), socket_(io), wait_(io) {}

void ExecRelay::start(const std::string& api_socket, std::string request_line) {
  auto self = shared_from_this();
  socket_.async_connect(
      stream_protocol::endpoint(api_socket),
      [self, request_line = std::move(request_line)](const boost::system::error_code& ec) mutable {
        if (self->over_) return;
        if (ec)
          return self->finish(
              json::serialize(json::object{
                  {"id", self->id_},
                  {"ok", false},
                  {"error", "the instance's shim does not answer on api.sock: " + ec.message()}}) +
              "\n");
        self->out_ = std::move(request_line);
        self->writing_ = true;
        boost::asio::async_write(
            self->socket_, boost::asio::buffer(self->out_),
            [self](const boost::system::error_code& wec, std::size_t) {
              self->writing_ = false;
              if (self->over_) return;
              if (wec)
                return self->finish(
                    json::serialize(json::object{{"id", self->id_},
                                                 {"ok", false},
                                                 {"error", "the instance's shim: " + wec.message()}}) +
                    "\n");
              self->read_line();
            });
      });
}

void ExecRelay::read_line() {
  if (over_) return;
  if (client_.gone()) return close();
  // Backpressure: the client's queue first drains under its bound.
  if (client_.queued() > kMaxQueuedBytes) {
    wait_.expires_after(std::chrono::milliseconds(20));
    wait_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->read_line();
    });
    return;
  }
  boost::asio::async_read_until(
      socket_, boost::asio::dynamic_buffer(in_, kMaxExecLine + 1), '\n',
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
        if (self->over_) return;
        if (ec) {
          const char* what = ec == boost::asio::error::not_found
                                 ? "the shim sent a line over the bound"
                                 : "the instance's shim went away before the command ended";
          json::object o{{"id", self->id_}};
          if (self->accepted_) {
            o["done"] = true;
            o["error"] = what;
          } else {
            o["ok"] = false;
            o["error"] = what;
          }
          return self->finish(json::serialize(o) + "\n");
        }
        std::string line = self->in_.substr(0, n - 1);
        self->in_.erase(0, n);
        self->on_line(line);
        if (!self->over_) self->read_line();
      });
}

void ExecRelay::on_line(std::string_view line) {
  std::error_code ec;
  json::value v = json::parse(json::string_view(line.data(), line.size()), ec);
  if (ec || !v.is_object() || line.empty() || line.front() != '{') {
    json::object o{{"id", id_}, {"error", "the instance's shim sent a line that is not a JSON object"}};
    o[accepted_ ? "done" : "ok"] = accepted_;
    return finish(json::serialize(o) + "\n");
  }
  const json::object& o = v.get_object();
  if (!accepted_) {
    auto* ok = o.if_contains("ok");
    if (ok == nullptr || !ok->is_bool() || !ok->get_bool()) {
      auto* e = o.if_contains("error");
      std::string why = e != nullptr && e->is_string() ? std::string(e->get_string()) : "the shim refused";
      return finish(json::serialize(json::object{{"id", id_}, {"ok", false}, {"error", why}}) + "\n");
    }
    accepted_ = true;
    json::object answer{{"id", id_}, {"ok", true}, {"stream", "exec"}, {"agent_reported", true}};
    if (auto* s = o.if_contains("session")) answer["session"] = *s;
    client_.send(json::serialize(answer) + "\n");
    return;
  }
  // Passed on as the shim wrote it, with the id first: no second serialization of the output.
  std::string out = "{\"id\":" + std::to_string(id_) + (line.size() > 2 ? "," : "");
  out.append(line.substr(1));
  out.push_back('\n');
  if (o.contains("done")) return finish(out);
  client_.send(std::move(out));
}

void ExecRelay::finish(const std::string& last_line) {
  if (over_) return;
  client_.send(last_line);
  close();
}

void ExecRelay::input(std::string line, std::function<void(const std::string& error)> done) {
  if (over_ || !accepted_) return done("the exec has ended");
  if (writing_) return done("busy: wait for the answer to the last exec_input");
  out_ = std::move(line);
  writing_ = true;
  boost::asio::async_write(
      socket_, boost::asio::buffer(out_),
      [self = shared_from_this(), done = std::move(done)](const boost::system::error_code& ec, std::size_t) {
        self->writing_ = false;
        done(ec ? "the exec's shim: " + ec.message() : std::string());
      });
}

void ExecRelay::close() {
  if (over_) return;
  over_ = true;
  wait_.cancel();
  boost::system::error_code ignored;
  socket_.close(ignored);
  if (auto f = std::move(on_end_)) f();
}

}  // namespace abox::engine
